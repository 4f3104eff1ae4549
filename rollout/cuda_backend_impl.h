// Private to the CUDA rollout backend (rollout/cuda_backend.h says what it does): the
// CudaBackend class, shared by cuda_backend.cpp (the forward step) and
// cuda_backend_setup.cpp (the device, device memory for weights, workspace and KV cache,
// weight uploads and updates). Each file instantiates the members it defines for fp32
// (float) and bf16. One CudaBackend is one rank of a tensor-parallel group
// (rollout/cuda_tensor_parallel.cpp holds the group); unsplit, rank 0 of 1.
#pragma once

#include "actor/tensor_parallel_layout.h"
#include "kernels/paged_attention.h"
#include "rollout/cuda_resources.h"
#include "rollout/cuda_step_plan.h"
#include "rollout/engine.h"
#include "rollout/model_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace tandem::cuda_backend {

template <typename T>
const char* dtype_name() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
}

// The collectives a rank's forward needs at the split points (NCCL in
// rollout/cuda_tensor_parallel.cpp). Each is enqueued on `stream` and returns at once.
class RankCollectives {
 public:
  virtual ~RankCollectives() = default;
  // data[0, count) summed over the group, in place; the step's dtype (bf16 or fp32).
  virtual void all_reduce_sum(void* data, int64_t count, bool bf16, cudaStream_t stream) = 0;
  // received[r * count, (r + 1) * count) = rank r's sent[0, count), fp32.
  virtual void all_gather(const float* sent, int64_t count, float* received, cudaStream_t stream) = 0;
};

// Which part of the model a backend holds (actor/tensor_parallel_layout.h) and where.
struct RankSetup {
  TensorParallelSpec spec;                  // {1, 0}: the whole model
  int device = 0;                           // the CUDA device ordinal
  RankCollectives* collectives = nullptr;   // null when unsplit
};

template <typename T>
class CudaBackend final : public ModelBackend {
 public:
  // `weights`: the rank's tensors (canonical names, its shard's shapes).
  CudaBackend(const ModelConfig& config, ModelWeights weights, const EngineOptions& options, const RankSetup& rank);

  const ModelConfig& config() const override { return config_; }
  // The rank's tensors (its shard's shapes), a subset is fine; checked before any upload.
  void update_weights(const ModelWeights& update) override;
  int64_t kv_blocks() const override { return num_blocks_; }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  void copy_kv_blocks(const std::vector<KvBlockCopy>& copies) override;
  std::string name() const override { return fmt::format("cuda {} ({})", dtype_name<T>(), device_name_); }

  // One rank's part of a step: every rank of a group runs it at once (on its own host
  // thread: the collectives wait for each other). Rank 0 writes the [rows, head_rows]
  // logits to `logits` (host memory); the others pass null.
  void forward_rank(const ForwardBatch& batch, float* logits);
  const StepPlanLimits& step_limits() const { return limits_; }
  // Names and shapes against the rank's tensors; throws Error naming the first bad tensor.
  void check_update(const ModelWeights& update) const;
  const std::string& device_name() const { return device_name_; }

 private:
  struct LayerWeights {
    const T* input_norm = nullptr;  // [hidden]
    const T* qkv = nullptr;         // [q_size + 2 kv_size, hidden]: q, k, v projections stacked
    const T* qkv_bias = nullptr;    // [q_size + 2 kv_size], attention_bias only
    const T* q_norm = nullptr;      // [head_dim], qk_norm only
    const T* k_norm = nullptr;      // [head_dim], qk_norm only
    const T* o = nullptr;           // [hidden, q_size]
    const T* o_bias = nullptr;      // [hidden], o_proj_bias() only
    const T* post_norm = nullptr;   // [hidden]
    const T* gate_up = nullptr;     // [2 intermediate, hidden]: gate rows, then up rows
    const T* down = nullptr;        // [hidden, intermediate]
  };
  // Where a Hugging Face tensor lives on the device (inside a stacked buffer for q/k/v, gate/up).
  struct Destination {
    T* data = nullptr;
    std::vector<int64_t> shape;
  };

  void use_device() const { cuda_check(cudaSetDevice(device_), "selecting the device", "cudaSetDevice"); }
  void allocate_weights();
  T* allocate_weight(int64_t count, const std::string& what);
  void bind(const std::string& name, T* data);
  void upload(const WeightTensor& tensor, const char* where);
  void allocate_workspace();
  void allocate_kv_cache(const EngineOptions& options);
  void plan(const ForwardBatch& batch);
  void run_layer(int64_t layer);
  void attention(int64_t layer, const T* q, int64_t q_stride);
  void embed_tokens();
  void all_reduce(T* data, int64_t count);
  void final_rows(float* logits);
  // y[rows, out] = x[rows, in] w[out, in]^T, fp32 accumulation.
  void gemm(const T* x, int64_t rows, int64_t in, const T* w, int64_t out, void* y, cudaDataType_t y_type,
            const char* where);

  ModelConfig config_;
  RankSetup rank_;
  LocalSizes local_;  // the rank's heads, KV heads, MLP columns and vocabulary rows (all when unsplit)
  int64_t q_size_ = 0, kv_size_ = 0;  // the rank's q and k (or v) widths
  int64_t head_cols_ = 0;             // logits the rank's head computes per row
  int device_;  // before the stream and handle: set current before they are created
  cuda_backend::Stream stream_;
  cuda_backend::CublasHandle cublas_;
  std::string device_name_;
  int64_t block_size_ = 0;
  int64_t max_tokens_ = 0;       // per step (max_batch_tokens)
  int64_t max_seqs_ = 0;         // per step: min(max_running, max_batch_tokens)
  int64_t max_rows_ = 0;         // logit rows per final-norm + lm_head pass
  int64_t max_table_width_ = 0;  // blocks of a max_position_embeddings sequence
  int64_t num_blocks_ = 0;
  int64_t weight_bytes_ = 0;
  float attention_scale_ = 0;

  std::vector<DeviceMemory> weight_memory_;
  std::map<std::string, Destination> destinations_;
  std::vector<LayerWeights> layers_;
  const T* embed_ = nullptr;       // [vocab, hidden]
  const T* final_norm_ = nullptr;  // [hidden]
  const T* lm_head_ = nullptr;     // [vocab, hidden]; embed_ when tied; a classifier's score [labels, hidden]

  // Activations of one step, [max_tokens_, ...] each.
  DeviceMemory residual_, hidden_, y_, qkv_, q_normed_, k_normed_, attn_, gate_up_, act_;
  DeviceMemory rows_residual_, rows_y_, logits_;  // [max_rows_, hidden] x 2, fp32 [max_rows_, head_cols_]
  DeviceMemory gathered_logits_;                  // split: fp32 [T, max_rows_, head_cols_], every rank's
  DeviceMemory decode_workspace_;
  DeviceMemory rope_cos_, rope_sin_;  // fp32 [max_position_embeddings, head_dim / 2]
  DeviceMemory meta_;                 // int32 [limits_.meta_capacity]: StepPlan::meta
  DeviceMemory slots_;                // int64 [max_tokens_]: each token's cache slot
  DeviceMemory kv_cache_;
  std::vector<kernels::PagedKvCache<T>> cache_layers_;

  StepPlanLimits limits_;
  StepPlan plan_;
  std::vector<uint16_t> staging_;  // bf16 upload staging
};

}  // namespace tandem::cuda_backend
