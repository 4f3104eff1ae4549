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

class CpuBackend final : public ModelBackend {
 public:
  CpuBackend(const ModelConfig& config, ModelWeights weights, const EngineOptions& options)
      : model_(config, std::move(weights), options.threads), cache_(cache_shape(config, options)) {}

  const ModelConfig& config() const override { return model_.config(); }
  void update_weights(const ModelWeights& update) override { model_.update_weights(update); }
  int64_t kv_blocks() const override { return cache_.shape().num_blocks; }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override { model_.forward(batch, cache_, logits); }
  void copy_kv_blocks(const std::vector<KvBlockCopy>& copies) override {
    for (const KvBlockCopy& c : copies) cache_.copy_block(c.from, c.to);
  }
  std::string name() const override { return "cpu"; }

 private:
  static KvCacheShape cache_shape(const ModelConfig& c, const EngineOptions& o) {
    KvCacheShape shape{c.num_hidden_layers, c.num_key_value_heads, c.head_dim, o.block_size, 0};
    shape.num_blocks = kv_cache_blocks_for_budget(o.kv_cache_bytes, shape);
    return shape;
  }

  CpuModel model_;
  KvCache cache_;
};

}  // namespace

std::unique_ptr<ModelBackend> make_model_backend(const ModelConfig& config, ModelWeights weights,
                                                 const EngineOptions& options) {
  if (options.device == "cpu") return std::make_unique<CpuBackend>(config, std::move(weights), options);
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
