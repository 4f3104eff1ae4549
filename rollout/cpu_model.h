// The rollout engine's transformer forward on CPU: float32, no autograd, keys and
// values appended to a paged KV cache. One call runs a whole scheduler step: prefill
// chunks of new sequences and single decode tokens of running ones, flattened into one
// token list so every matrix product sees all of the step's tokens at once.
//
// Tensor parallelism (rollout.tensor_parallel, actor/tensor_parallel_layout.h): the model
// is split over T ranks as the learner splits it, each rank with its shard of the weights
// and its own KV cache holding its KV heads. The ranks run one after another on this
// process's threads; the split points behave as the collectives would: the partial sums of
// o_proj and down_proj are added in rank order (the all-reduce), the embedding reads the
// row from the rank that holds it, and the logits are each rank's vocabulary columns.
#pragma once

#include "actor/lora.h"
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/tensor_parallel_layout.h"
#include "rollout/cpu_ops.h"
#include "rollout/kv_cache.h"
#include "rollout/model_backend.h"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

class ThreadPool;

class CpuModel {
 public:
  // `threads`: cores to use, 0 for all. `weights`: canonical (unsplit), sharded here.
  // `bf16_weights` (rollout.cpu_weights: bf16): the matrices (projections, embedding, LM
  // head) are also held rounded to bfloat16, and the products and the embedding lookup
  // read those (cpu::gemm_nt_bf16: half the bytes per weight, so decode at small batches,
  // bound by memory bandwidth, runs up to 2x faster); activations, norms, biases and the
  // KV cache stay float32. The float32 weights are kept: updates and resharding write
  // them, then their rounded copies are refreshed.
  CpuModel(const ModelConfig& config, const ModelWeights& weights, int threads = 0, int tensor_parallel = 1,
           bool bf16_weights = false);
  bool bf16_weights() const { return bf16_weights_; }
  ~CpuModel();

  const ModelConfig& config() const { return config_; }
  int tensor_parallel() const { return static_cast<int>(ranks_.size()); }
  // The KV cache shape of one rank: its KV heads.
  KvCacheShape rank_cache_shape(int64_t block_size, int64_t num_blocks) const;
  // One rank's weights: canonical names, the shard's shapes.
  const ModelWeights& shard_weights(int rank) const { return ranks_[rank].weights; }
  const std::vector<ParameterShard>& shard_layout(int rank) const { return ranks_[rank].layout; }

  // Replaces canonical weights by name (a subset is fine), each rank taking its shard;
  // names and shapes are checked first, so a bad update changes nothing.
  void update_weights(const ModelWeights& update);
  // Replaces each rank's local tensors by name (shards[rank]; a subset is fine): what the
  // resharding weight sync assembles. Checked first, as above.
  void update_shards(const std::vector<ModelWeights>& shards);

  // LoRA (actor/lora.h): adapters on spec.modules, applied unmerged: a projection computes
  // W·x + scale·B·(A·x), no merged weight is ever formed (so no merge rounding), each rank
  // holding its split of them (lora_adapter_layout). They start at zero (the base model);
  // update_weights takes them by their names (model.layers.L....q_proj.lora_A.weight).
  void add_adapters(const LoraSpec& spec);
  bool has_adapters() const { return lora_.rank > 0; }

  // Writes logits [logit_rows.size(), vocab] to `logits` (resized); a classifier's
  // (config.num_labels > 0) rows are its num_labels scores. `caches`: one per rank.
  void forward(const ForwardBatch& batch, std::vector<KvCache>& caches, std::vector<float>& logits);

 private:
  struct LayerWeights {
    const float* input_norm;
    cpu::LinearWeight q;
    cpu::LinearWeight k;
    cpu::LinearWeight v;
    const float* q_bias = nullptr;
    const float* k_bias = nullptr;
    const float* v_bias = nullptr;
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    cpu::LinearWeight o;
    const float* o_bias = nullptr;
    const float* post_norm;
    cpu::LinearWeight gate;
    cpu::LinearWeight up;
    cpu::LinearWeight down;
  };
  // A projection's adapters on one rank (null: not targeted).
  struct Adapter {
    const float* a = nullptr;  // [r, local in]
    const float* b = nullptr;  // [local out, r]
  };
  static constexpr size_t kProjections = 7;  // lora_projections(): q, k, v, o, gate, up, down
  struct Rank {
    LocalSizes sizes;
    std::vector<ParameterShard> adapter_layout;
    ModelWeights adapters;
    std::vector<std::array<Adapter, kProjections>> layer_adapters;
    std::vector<ParameterShard> layout;
    ModelWeights weights;
    std::vector<LayerWeights> layers;
    std::map<std::string, std::vector<uint16_t>> rounded;  // bf16_weights: the matrices' bfloat16 bits
    cpu::LinearWeight embed;
    cpu::LinearWeight lm_head;
    int64_t head_rows = 0;  // rows of lm_head with a logit (the real vocabulary rows, or num_labels)
  };
  void bind_weights(Rank& rank);
  // bf16_weights: (re)rounds the rank's matrix `name` into rank.rounded (a no-op for
  // tensors that have no rounded copy, or without bf16_weights).
  void round_matrix(Rank& rank, const std::string& name);
  void attention(const ForwardBatch& batch, int64_t layer, const Rank& rank, const KvCache& cache);
  // The rank's attention block for this layer: h_ (normed input) in, its partial o_proj output in part_.
  void attention_block(const ForwardBatch& batch, int64_t layer, const Rank& rank, KvCache& cache);
  // y [tokens, out] += scale·B·(A·x) for projection `projection` of `layer`, when it has adapters.
  void add_adapter_term(const Rank& rank, int64_t layer, size_t projection, const float* x, int64_t tokens,
                        int64_t in, int64_t out, float* y);
  // Adds part_ into h_ (rank 0 copies): the all-reduce of the partial sums, in rank order.
  void accumulate_partial(int rank, int64_t count);

  ModelConfig config_;
  bool bf16_weights_ = false;
  std::vector<Rank> ranks_;
  const float* final_norm_ = nullptr;
  std::vector<double> inverse_frequencies_;

  // Workspace, grown to the largest step seen and reused (no allocation per layer).
  LoraSpec lora_;
  std::vector<float> low_, adapter_out_;  // the adapter terms' workspace
  std::vector<float> x_, h_, normed_, part_, q_, k_, v_, attn_, gate_, up_, cos_, sin_, rows_, head_out_;
  std::vector<int64_t> positions_;                  // per token of the step
  std::vector<const int32_t*> token_block_table_;   // per token: its sequence's block table
  int64_t attention_multiply_adds_ = 0;             // per layer and rank, for the threading decision
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace tandem
