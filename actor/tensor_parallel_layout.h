// Tensor parallelism (Megatron's layout): how a model's weights split over T ranks, and the
// collectives its forward needs at the split points.
//
// Each rank of a tensor-parallel group holds:
//   q/k/v projections (and their biases)  rows of its attention heads (column-parallel)
//   o_proj                                 the matching columns (row-parallel)
//   gate/up projections                    rows [r·I/T, (r+1)·I/T) (column-parallel)
//   down_proj                              the matching columns (row-parallel)
//   embed_tokens, lm_head                  rows [r·⌈V/T⌉, (r+1)·⌈V/T⌉) of the vocabulary
//   norms, o_proj's bias                   everything (replicated)
// Query heads split evenly; key/value heads too when T divides them, and otherwise (T a
// multiple of the KV heads) each rank holds the one KV head its query heads read,
// replicated over the T / KV ranks that share it. The vocabulary is padded to a multiple
// of T: a rank's padding rows are zero, never looked up and left out of the softmax, like
// the ids past config.sampled_vocab().
//
// Forward of a layer, for input x (replicated, or with sequence parallelism this rank's
// L/T positions of it):
//   h = norm(x); H = enter(h)                      copy (bwd all-reduce) | all-gather along L (bwd reduce-scatter)
//   attention over local heads; o = H_attn · o_projᵀ   a partial sum over ranks
//   x = x + leave(o) (+ o_proj bias)               all-reduce (bwd copy) | reduce-scatter along L (bwd all-gather)
// and the MLP the same way: 2 all-reduces per layer forward without SP, 2 all-gathers and
// 2 reduce-scatters with it. The embedding sums each rank's rows (an all-reduce, or a
// reduce-scatter with SP); the LM head's log-probs are vocabulary-parallel
// (learner/head_logprobs.h) and never gather [tokens, vocab] logits.
#pragma once

#include "actor/model_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct TensorParallelSpec {
  int size = 1;  // T
  int rank = 0;  // this rank's place in the group, 0..T-1
  bool sequence_parallel = false;
};

// Whether `config` splits over `size` ranks; an Error naming what does not divide
// otherwise ("learner.tensor_parallel: ..." is the caller's `where`).
void check_tensor_parallel(const ModelConfig& config, int size, const std::string& where);

// How one parameter of the canonical (unsplit) model lives on a rank.
struct ParameterShard {
  std::string name;
  std::vector<int64_t> canonical_shape;
  std::vector<int64_t> local_shape;  // the rank's tensor (vocabulary rows include padding)
  int dim = -1;                      // -1: replicated; 0: a block of rows; 1: a block of columns
  int64_t begin = 0;                 // the block's first canonical row or column
  int64_t length = 0;                // canonical rows or columns it covers (local_shape[dim] minus padding)
  // The rank's gradient is a part of the whole: summed over the group before the optimizer
  // step (learner/trainer.cpp). Norms under sequence parallelism (each rank normed its
  // positions), q_norm/k_norm (each rank's heads), KV heads replicated over several ranks.
  bool partial_gradient = false;
};

// Every parameter of expected_weights(config), in that order, for `spec`.
std::vector<ParameterShard> tensor_parallel_layout(const ModelConfig& config, const TensorParallelSpec& spec);

// Query heads, KV heads, MLP columns and vocabulary rows a rank holds.
struct LocalSizes {
  int64_t heads = 0, kv_heads = 0, intermediate = 0;
  int64_t vocab_rows = 0;    // ⌈V/T⌉, padding included
  int64_t vocab_begin = 0;   // the first canonical id of the rank's rows
  int64_t head_rows = 0;     // rows that get a logit: ids below config.sampled_vocab()
};
LocalSizes local_sizes(const ModelConfig& config, const TensorParallelSpec& spec);

}  // namespace tandem
