// make_model_backend, and the CPU backend: CpuModel over a host KvCache sized by
// EngineOptions::kv_cache_bytes (the numerics are CpuModel's, unchanged).
#include "rollout/model_backend.h"

#include "core/error.h"
#include "rollout/cpu_model.h"
#include "rollout/engine.h"
#include "rollout/kv_cache.h"

#if TANDEM_WITH_CUDA
#include "kernels/device_probe.h"
#include "rollout/cuda_backend.h"
#endif

namespace tandem {

namespace {

bool cpu_bf16_weights(const EngineOptions& options) {
  if (options.cpu_weights != "fp32" && options.cpu_weights != "bf16") {
    throw Error(fmt::format("rollout.cpu_weights: \"{}\" (allowed: fp32, bf16)", options.cpu_weights));
  }
  return options.cpu_weights == "bf16";
}

class CpuBackend final : public ModelBackend {
 public:
  CpuBackend(const ModelConfig& config, const ModelWeights& weights, const EngineOptions& options)
      : model_(config, weights, options.threads, options.tensor_parallel, cpu_bf16_weights(options)) {
    // kv_cache_bytes is the worker's budget over all of its ranks: a block costs every
    // rank's KV heads (more than the model's when KV heads are replicated).
    const int ranks = model_.tensor_parallel();
    KvCacheShape all_ranks = model_.rank_cache_shape(options.block_size, 0);
    all_ranks.num_kv_heads *= ranks;
    const int64_t blocks = kv_cache_blocks_for_budget(options.kv_cache_bytes, all_ranks);
    for (int r = 0; r < ranks; ++r) caches_.emplace_back(model_.rank_cache_shape(options.block_size, blocks));
  }

  const ModelConfig& config() const override { return model_.config(); }
  void update_weights(const ModelWeights& update) override { model_.update_weights(update); }
  int tensor_parallel() const override { return model_.tensor_parallel(); }
  void update_weight_shards(const std::vector<ModelWeights>& shards) override { model_.update_shards(shards); }
  void add_adapters(const LoraSpec& spec) override { model_.add_adapters(spec); }
  bool applies_adapters() const override { return true; }
  int64_t kv_blocks() const override { return caches_[0].shape().num_blocks; }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override { model_.forward(batch, caches_, logits); }
  void copy_kv_blocks(const std::vector<KvBlockCopy>& copies) override {
    for (KvCache& cache : caches_) {
      for (const KvBlockCopy& c : copies) cache.copy_block(c.from, c.to);
    }
  }
  std::string name() const override {
    std::string name = model_.tensor_parallel() == 1 ? "cpu" : fmt::format("cpu, tensor_parallel {}", model_.tensor_parallel());
    return model_.bf16_weights() ? name + ", bf16 weights" : name;
  }

 private:
  CpuModel model_;
  std::vector<KvCache> caches_;  // per rank
};

}  // namespace

void ModelBackend::update_weight_shards(const std::vector<ModelWeights>& shards) {
  TANDEM_CHECK(shards.size() == 1, "{}: {} weight shards for an engine that is not split", name(), shards.size());
  update_weights(shards[0]);
}

void ModelBackend::add_adapters(const LoraSpec&) {
  throw Error(fmt::format("learner.lora: the {} rollout backend does not apply LoRA adapters unmerged; the CPU "
                          "backend does",
                          name()));
}

std::unique_ptr<ModelBackend> make_model_backend(const ModelConfig& config, ModelWeights weights,
                                                 const EngineOptions& options) {
  if (options.device == "cpu") return std::make_unique<CpuBackend>(config, weights, options);
  if (options.device != "cuda") {
    throw Error(fmt::format("rollout: device \"{}\" is not a backend (allowed: cpu, cuda; \"auto\" is resolved by "
                            "the caller)",
                            options.device));
  }
#if TANDEM_WITH_CUDA
  const CudaProbe probe = probe_cuda();
  if (!probe.usable) throw Error(fmt::format("rollout: device cuda, but no CUDA device is usable: {}", probe.detail));
  return make_cuda_backend(config, std::move(weights), options);
#else
  throw Error("rollout: device cuda, but tandem was built without CUDA");
#endif
}

}  // namespace tandem
