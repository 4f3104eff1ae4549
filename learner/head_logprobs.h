// The LM head's log-probs and entropies for chosen tokens, computed a tile of rows x
// vocabulary at a time so that the [tokens, vocab] float32 logits and their gradient
// never exist whole.
//
// With a 151k-token vocabulary, one 512-token micro-batch's logits are 310 MB, and
// autograd would keep them, their softmax and their gradient alive at once. Here forward
// keeps only each row's log-sum-exp and entropy (accumulated over vocabulary chunks as a
// running maximum, sum and first moment); backward recomputes each tile's logits from the
// hidden states and turns them straight into the gradients of the hidden states and of
// the head's weight. The idea is Liger's fused linear cross-entropy, extended to the
// entropy (which RL objectives read and may train on). Chunking the vocabulary inside a
// large block of rows reads the head's weight once per block and writes each slice of its
// gradient once per block, instead of once per small row chunk.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace tandem {

class GroupTensorParallelOps;

struct HeadLogProbs {
  at::Tensor logprobs;  // [N] float32: log softmax(hidden_i · weightᵀ / temperature)[targets_i]
  at::Tensor entropy;   // [N] float32: entropy of that distribution
};

// The tile of logits held at once: `rows` hidden states x `vocab` ids (defaults: 16 MB).
// On the CPU, when all of a call's float32 logits take at most `kept_logits_bytes`, forward
// keeps them for backward, which then skips recomputing them: a quarter of the head's
// products (forward 1, backward 3 with the recompute, 2 without). A 512-token micro-batch
// over 151,936 ids keeps 311 MB; larger ones recompute as before.
struct HeadTiles {
  int64_t rows = 1024;
  int64_t vocab = 4096;
  int64_t kept_logits_bytes = int64_t{512} << 20;
};

// hidden [N, H] and weight [V, H], targets [N] int64 in [0, V). The products run in
// `compute` (default: hidden's dtype), the weight cast to it a tile at a time (bf16
// products over float32 master weights: learner.precision bf16); the softmax statistics,
// the results and the gradient sums are float32, and the gradients come back in each
// input's own dtype. Differentiable in `hidden` and `weight`.
//
// Vocabulary-parallel (`vocab` set, learner/tensor_parallel_ops.h): `weight` is this rank's
// rows of the head, the first being id `vocab_offset`; `hidden` and `targets` are the same
// on every rank of the group, and every rank calls together. Each rank's running
// maximum, sum and moment over its rows are combined across the group with three
// reductions of per-row scalars (the maximum; sum and moment rescaled to it, 2 floats;
// the target's logit, found on exactly one rank), so logits are never gathered. Backward
// then needs no collective: each rank's gradient of `hidden` is its rows' part, summed by
// the caller's region entry (PolicyModel::head_input), and its weight gradient is its own rows'.
//
// `weight_in_compute`, when defined, is `weight` already cast to the compute dtype (a copy
// kept across micro-batches, PolicyModel::kept_cast_weight): read instead of casting again.
// `gradient_buffer`, when defined (float32, weight's shape: the trainer's flat gradients,
// PolicyModel::head_gradient_buffer), takes the weight's gradient added in place by
// backward's products, and autograd gets none for `weight` (no [V, H] gradient to
// allocate and then add, per micro-batch).
HeadLogProbs head_logprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                           double temperature, HeadTiles tiles = {},
                           std::optional<at::ScalarType> compute = std::nullopt,
                           GroupTensorParallelOps* vocab = nullptr, int64_t vocab_offset = 0,
                           const at::Tensor& weight_in_compute = {}, const at::Tensor& gradient_buffer = {});

}  // namespace tandem
