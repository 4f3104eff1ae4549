// The model half of the rollout engine: weights, the paged KV cache's memory and the
// transformer forward of one scheduler step. The engine (rollout/engine.h) owns
// everything else: requests, the scheduler and its block tables, sampling, stop rules.
//
// Backends:
// - "cpu": rollout/cpu_model.h over a host KvCache of EngineOptions::kv_cache_bytes.
// - "cuda": rollout/cuda_backend.h, weights and KV cache in GPU memory (bf16 or fp32).
// Both fill the KV blocks the scheduler hands out (rollout/kv_cache.h's plan) and return
// fp32 logits on the host, so sampling, and with it tokens and log-probs, follows one
// code path (rollout/sampler.h) whatever the backend. Each backend passes the same
// conformance suite (tests/rollout/test_rollout_backends.cpp).
#pragma once

#include "actor/lora.h"
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "rollout/kv_cache.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct EngineOptions;  // rollout/engine.h

struct ForwardSequence {
  int64_t token_begin = 0;     // this step's tokens of the sequence: batch.tokens[token_begin, token_end)
  int64_t token_end = 0;
  int64_t start_position = 0;  // position of its first token this step (= tokens already cached)
  const int32_t* block_table = nullptr;  // blocks covering positions [0, start_position + count)
};

struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<ForwardSequence> sequences;
  std::vector<int64_t> logit_rows;  // indices into `tokens` whose next-token logits are wanted
};

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  virtual const ModelConfig& config() const = 0;
  // Replaces weights by HF name (a subset is fine). Names and shapes are checked first,
  // so a bad update throws Error and changes nothing.
  virtual void update_weights(const ModelWeights& update) = 0;
  // Ranks the model is split over (EngineOptions::tensor_parallel).
  virtual int tensor_parallel() const { return 1; }
  // Replaces each rank's local tensors (shards[rank]: canonical names, the shard's shapes
  // of actor/tensor_parallel_layout.h; a subset is fine), checked first as above. Unsplit,
  // the one shard is the canonical model.
  virtual void update_weight_shards(const std::vector<ModelWeights>& shards);
  // LoRA adapters applied unmerged (rollout/cpu_model.h), zero until update_weights brings
  // them by name. A backend that cannot apply them throws Error saying so.
  virtual void add_adapters(const LoraSpec& spec);
  virtual bool applies_adapters() const { return false; }
  // Blocks of its paged KV cache (each EngineOptions::block_size token slots).
  virtual int64_t kv_blocks() const = 0;
  // Runs the step: appends the keys and values of batch.tokens to the cache at the
  // positions the block tables give, and writes host fp32 logits [logit_rows.size(), vocab]
  // to `logits` (resized).
  virtual void forward(const ForwardBatch& batch, std::vector<float>& logits) = 0;
  // Copies whole blocks (keys and values of every slot and layer), in order: the
  // scheduler's copy-on-write of blocks that sequences shared, run before the step's
  // forward. Exact copies, so sharing changes no result.
  virtual void copy_kv_blocks(const std::vector<KvBlockCopy>& copies) = 0;
  // "cpu", or "cuda bf16 (<device name>)": for logs and errors.
  virtual std::string name() const = 0;
};

// The backend EngineOptions::device names ("cpu" | "cuda"); anything else is an Error
// naming the value. "cuda" in a build without CUDA, or without a usable GPU, is an Error
// saying why.
std::unique_ptr<ModelBackend> make_model_backend(const ModelConfig& config, ModelWeights weights,
                                                 const EngineOptions& options);

}  // namespace tandem
