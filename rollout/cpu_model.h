// The rollout engine's transformer forward on CPU: float32, no autograd, keys and
// values appended to a paged KV cache. One call runs a whole scheduler step: prefill
// chunks of new sequences and single decode tokens of running ones, flattened into one
// token list so every matrix product sees all of the step's tokens at once.
#pragma once

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "rollout/kv_cache.h"
#include "rollout/model_backend.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace tandem {

class ThreadPool;

class CpuModel {
 public:
  // `threads`: cores to use, 0 for all.
  CpuModel(const ModelConfig& config, ModelWeights weights, int threads = 0);
  ~CpuModel();

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // Replaces weights by name (a subset is fine); names and shapes are checked first,
  // so a bad update changes nothing.
  void update_weights(const ModelWeights& update);

  // Writes logits [logit_rows.size(), vocab] to `logits` (resized); a classifier's
  // (config.num_labels > 0) rows are its num_labels scores.
  void forward(const ForwardBatch& batch, KvCache& cache, std::vector<float>& logits);

 private:
  struct LayerWeights {
    const float* input_norm;
    const float* q;
    const float* k;
    const float* v;
    const float* q_bias = nullptr;
    const float* k_bias = nullptr;
    const float* v_bias = nullptr;
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    const float* o;
    const float* o_bias = nullptr;
    const float* post_norm;
    const float* gate;
    const float* up;
    const float* down;
  };
  void bind_weights();
  void attention(const ForwardBatch& batch, int64_t layer, const KvCache& cache);

  ModelConfig config_;
  ModelWeights weights_;
  std::vector<LayerWeights> layers_;
  const float* embed_ = nullptr;
  const float* final_norm_ = nullptr;
  const float* lm_head_ = nullptr;
  std::vector<double> inverse_frequencies_;

  // Workspace, grown to the largest step seen and reused (no allocation per layer).
  std::vector<float> x_, h_, q_, k_, v_, attn_, gate_, up_, cos_, sin_, rows_;
  std::vector<int64_t> positions_;                  // per token of the step
  std::vector<const int32_t*> token_block_table_;   // per token: its sequence's block table
  int64_t attention_multiply_adds_ = 0;             // per layer, for the threading decision
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace tandem
