#include "rollout/cuda_backend.h"

#include "core/error.h"
#include "core/half.h"
#include "core/log.h"
#include "kernels/norm_act.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"
#include "rollout/cuda_ops.h"
#include "rollout/cuda_resources.h"
#include "rollout/cuda_step_plan.h"
#include "rollout/engine.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <iterator>
#include <map>
#include <type_traits>

namespace tandem {

namespace {

using cuda_backend::cublas_check;
using cuda_backend::cuda_check;
using cuda_backend::DeviceMemory;
using kernels::bf16;

template <typename T>
cudaDataType_t cuda_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

template <typename T>
const char* dtype_name() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Decode attention's split-K workspace is sized for max_running contexts of this many
// tokens (and for one context of max_position_embeddings); a step with longer contexts
// runs its decode sequences in several launches instead of needing more memory.
constexpr int64_t kDecodeWorkspaceTokens = 4096;

int select_device(int ordinal) {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "setup", "cudaGetDeviceCount");
  if (ordinal < 0 || ordinal >= count) {
    throw Error(fmt::format("rollout cuda backend: cuda_device {} does not exist ({} CUDA devices)", ordinal, count));
  }
  cuda_check(cudaSetDevice(ordinal), "setup", "cudaSetDevice");
  return ordinal;
}

template <typename T>
class CudaBackend final : public ModelBackend {
 public:
  CudaBackend(const ModelConfig& config, ModelWeights weights, const EngineOptions& options);

  const ModelConfig& config() const override { return config_; }
  void update_weights(const ModelWeights& update) override;
  int64_t kv_blocks() const override { return num_blocks_; }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  void copy_kv_blocks(const std::vector<KvBlockCopy>& copies) override;
  std::string name() const override { return fmt::format("cuda {} ({})", dtype_name<T>(), device_name_); }

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
  void final_rows(std::vector<float>& logits);
  // y[rows, out] = x[rows, in] w[out, in]^T, fp32 accumulation.
  void gemm(const T* x, int64_t rows, int64_t in, const T* w, int64_t out, void* y, cudaDataType_t y_type,
            const char* where);

  ModelConfig config_;
  int device_;  // first: set current before the stream and handle are created
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
  const T* lm_head_ = nullptr;     // [vocab, hidden]; embed_ when tied

  // Activations of one step, [max_tokens_, ...] each.
  DeviceMemory residual_, hidden_, y_, qkv_, q_normed_, k_normed_, attn_, gate_up_, act_;
  DeviceMemory rows_residual_, rows_y_, logits_;  // [max_rows_, hidden] x 2, fp32 [max_rows_, vocab]
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

template <typename T>
CudaBackend<T>::CudaBackend(const ModelConfig& config, ModelWeights weights, const EngineOptions& options)
    : config_(config), device_(select_device(options.cuda_device)), cublas_(stream_.get()) {
  const ModelConfig& c = config_;
  check_weights(c, weights, "rollout engine");
  TANDEM_CHECK(c.num_hidden_layers >= 1, "rollout cuda backend: the model has no layers");
  if (std::find(std::begin(kernels::kAttentionHeadDims), std::end(kernels::kAttentionHeadDims), c.head_dim) ==
      std::end(kernels::kAttentionHeadDims)) {
    throw Error(fmt::format("rollout cuda backend: head_dim {} has no attention kernel (supported: 8, 16, 32, 64, "
                            "128, 256)",
                            c.head_dim));
  }
  if (!(options.gpu_memory_fraction > 0 && options.gpu_memory_fraction < 1)) {
    throw Error(fmt::format("rollout cuda backend: gpu_memory_fraction must be in (0, 1), got {}",
                            options.gpu_memory_fraction));
  }
  TANDEM_CHECK(options.max_kv_blocks >= 0, "rollout cuda backend: max_kv_blocks must be >= 0, got {}",
               options.max_kv_blocks);
  block_size_ = options.block_size;
  max_tokens_ = options.max_batch_tokens;
  max_seqs_ = std::min(options.max_running, options.max_batch_tokens);
  max_rows_ = max_seqs_;
  max_table_width_ = ceil_div(c.max_position_embeddings, block_size_);
  attention_scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  cudaDeviceProp props{};
  cuda_check(cudaGetDeviceProperties(&props, device_), "setup", "cudaGetDeviceProperties");
  device_name_ = props.name;

  allocate_weights();
  for (const WeightTensor& t : weights.tensors()) upload(t, "loading weights");
  allocate_workspace();
  allocate_kv_cache(options);
  limits_.vocab_size = c.vocab_size;
  limits_.max_positions = c.max_position_embeddings;
  limits_.block_size = block_size_;
  limits_.num_blocks = num_blocks_;
  limits_.max_tokens = max_tokens_;
  limits_.max_seqs = max_seqs_;
  const int64_t heads = c.num_attention_heads, head_dim = c.head_dim;
  limits_.decode_workspace_bytes = [heads, head_dim](int64_t seqs, int64_t max_seq_len) {
    return kernels::paged_decode_workspace_bytes(seqs, heads, head_dim, max_seq_len);
  };
  limits_.decode_workspace_capacity = decode_workspace_.bytes();
  cuda_check(cudaStreamSynchronize(stream_.get()), "setup", "cudaStreamSynchronize");
}

template <typename T>
T* CudaBackend<T>::allocate_weight(int64_t count, const std::string& what) {
  const int64_t bytes = count * static_cast<int64_t>(sizeof(T));
  weight_memory_.emplace_back(bytes, what);
  weight_bytes_ += bytes;
  return weight_memory_.back().template as<T>();
}

template <typename T>
void CudaBackend<T>::bind(const std::string& name, T* data) {
  TANDEM_CHECK(destinations_.emplace(name, Destination{data, {}}).second, "rollout cuda backend: {} bound twice", name);
}

template <typename T>
void CudaBackend<T>::allocate_weights() {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, qs = c.q_size(), kvs = c.kv_size(), inter = c.intermediate_size;
  const int64_t qkv = qs + 2 * kvs;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    LayerWeights l;
    T* input_norm = allocate_weight(hidden, p + "input_layernorm");
    bind(p + "input_layernorm.weight", input_norm);
    T* stacked = allocate_weight(qkv * hidden, p + "q|k|v_proj");
    bind(p + "self_attn.q_proj.weight", stacked);
    bind(p + "self_attn.k_proj.weight", stacked + qs * hidden);
    bind(p + "self_attn.v_proj.weight", stacked + (qs + kvs) * hidden);
    l.input_norm = input_norm;
    l.qkv = stacked;
    if (c.attention_bias) {
      T* bias = allocate_weight(qkv, p + "q|k|v_proj.bias");
      bind(p + "self_attn.q_proj.bias", bias);
      bind(p + "self_attn.k_proj.bias", bias + qs);
      bind(p + "self_attn.v_proj.bias", bias + qs + kvs);
      l.qkv_bias = bias;
    }
    if (c.qk_norm) {
      T* q_norm = allocate_weight(c.head_dim, p + "q_norm");
      T* k_norm = allocate_weight(c.head_dim, p + "k_norm");
      bind(p + "self_attn.q_norm.weight", q_norm);
      bind(p + "self_attn.k_norm.weight", k_norm);
      l.q_norm = q_norm;
      l.k_norm = k_norm;
    }
    T* o = allocate_weight(hidden * qs, p + "o_proj");
    bind(p + "self_attn.o_proj.weight", o);
    l.o = o;
    if (c.o_proj_bias()) {
      T* o_bias = allocate_weight(hidden, p + "o_proj.bias");
      bind(p + "self_attn.o_proj.bias", o_bias);
      l.o_bias = o_bias;
    }
    T* post_norm = allocate_weight(hidden, p + "post_attention_layernorm");
    bind(p + "post_attention_layernorm.weight", post_norm);
    l.post_norm = post_norm;
    T* gate_up = allocate_weight(2 * inter * hidden, p + "gate|up_proj");
    bind(p + "mlp.gate_proj.weight", gate_up);
    bind(p + "mlp.up_proj.weight", gate_up + inter * hidden);
    l.gate_up = gate_up;
    T* down = allocate_weight(hidden * inter, p + "down_proj");
    bind(p + "mlp.down_proj.weight", down);
    l.down = down;
    layers_.push_back(l);
  }
  T* embed = allocate_weight(c.vocab_size * hidden, "embed_tokens");
  bind("model.embed_tokens.weight", embed);
  T* final_norm = allocate_weight(hidden, "norm");
  bind("model.norm.weight", final_norm);
  embed_ = embed;
  final_norm_ = final_norm;
  if (c.tie_word_embeddings) {
    lm_head_ = embed;  // one buffer: an update of the embeddings updates the head
  } else {
    T* lm_head = allocate_weight(c.vocab_size * hidden, "lm_head");
    bind("lm_head.weight", lm_head);
    lm_head_ = lm_head;
  }
  // Every expected tensor has exactly one destination, with its shape.
  const std::vector<WeightSpec> specs = expected_weights(c);
  TANDEM_CHECK(specs.size() == destinations_.size(), "rollout cuda backend: {} destinations for {} tensors",
               destinations_.size(), specs.size());
  for (const WeightSpec& spec : specs) {
    auto it = destinations_.find(spec.name);
    TANDEM_CHECK(it != destinations_.end(), "rollout cuda backend: no destination for {}", spec.name);
    it->second.shape = spec.shape;
  }
}

template <typename T>
void CudaBackend<T>::upload(const WeightTensor& t, const char* where) {
  const Destination& d = destinations_.at(t.name);
  const size_t n = t.data.size();
  const std::string what = fmt::format("{}: {}", where, t.name);
  if constexpr (std::is_same_v<T, float>) {
    cuda_check(cudaMemcpyAsync(d.data, t.data.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream_.get()), what,
               "cudaMemcpyAsync");
  } else {
    staging_.resize(n);
    for (size_t i = 0; i < n; ++i) staging_[i] = float_to_bf16(t.data[i]);
    cuda_check(cudaMemcpyAsync(d.data, staging_.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice, stream_.get()),
               what, "cudaMemcpyAsync");
  }
  // The host buffers may change once this returns.
  cuda_check(cudaStreamSynchronize(stream_.get()), what, "cudaStreamSynchronize");
}

template <typename T>
void CudaBackend<T>::update_weights(const ModelWeights& update) {
  // Check everything before touching anything (as CpuModel::update_weights).
  for (const WeightTensor& t : update.tensors()) {
    auto it = destinations_.find(t.name);
    if (it == destinations_.end()) {
      throw Error(fmt::format("weight update: unexpected tensor {} (not part of this {} model)", t.name,
                              config_.model_type));
    }
    if (it->second.shape != t.shape) {
      throw Error(fmt::format("weight update: tensor {} has shape [{}], the engine's is [{}]", t.name,
                              fmt::join(t.shape, ", "), fmt::join(it->second.shape, ", ")));
    }
  }
  use_device();
  for (const WeightTensor& t : update.tensors()) upload(t, "weight update");
}

template <typename T>
void CudaBackend<T>::allocate_workspace() {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, qs = c.q_size(), kvs = c.kv_size(), inter = c.intermediate_size;
  const int64_t n = max_tokens_, e = static_cast<int64_t>(sizeof(T));
  residual_ = DeviceMemory(n * hidden * e, "workspace: residual");
  hidden_ = DeviceMemory(n * hidden * e, "workspace: normed hidden");
  y_ = DeviceMemory(n * hidden * e, "workspace: projection output");
  qkv_ = DeviceMemory(n * (qs + 2 * kvs) * e, "workspace: qkv");
  if (c.qk_norm) {
    q_normed_ = DeviceMemory(n * qs * e, "workspace: normed q");
    k_normed_ = DeviceMemory(n * kvs * e, "workspace: normed k");
  }
  attn_ = DeviceMemory(n * qs * e, "workspace: attention output");
  gate_up_ = DeviceMemory(n * 2 * inter * e, "workspace: gate|up");
  act_ = DeviceMemory(n * inter * e, "workspace: silu(gate) * up");
  rows_residual_ = DeviceMemory(max_rows_ * hidden * e, "workspace: logit rows (residual)");
  rows_y_ = DeviceMemory(max_rows_ * hidden * e, "workspace: logit rows");
  logits_ = DeviceMemory(max_rows_ * c.vocab_size * static_cast<int64_t>(sizeof(float)), "workspace: logits");
  const int64_t decode_bytes = std::max(
      kernels::paged_decode_workspace_bytes(max_seqs_, c.num_attention_heads, c.head_dim,
                                            std::min(c.max_position_embeddings, kDecodeWorkspaceTokens)),
      kernels::paged_decode_workspace_bytes(1, c.num_attention_heads, c.head_dim, c.max_position_embeddings));
  decode_workspace_ = DeviceMemory(decode_bytes, "workspace: decode attention partitions");

  std::vector<float> cos, sin;
  kernels::rope_cos_sin_table(rope_inverse_frequencies(c), c.max_position_embeddings, cos, sin);
  rope_cos_ = DeviceMemory(static_cast<int64_t>(cos.size() * sizeof(float)), "rope cos table");
  rope_sin_ = DeviceMemory(static_cast<int64_t>(sin.size() * sizeof(float)), "rope sin table");
  cuda_check(cudaMemcpyAsync(rope_cos_.as<float>(), cos.data(), cos.size() * sizeof(float), cudaMemcpyHostToDevice,
                             stream_.get()),
             "rope table", "cudaMemcpyAsync");
  cuda_check(cudaMemcpyAsync(rope_sin_.as<float>(), sin.data(), sin.size() * sizeof(float), cudaMemcpyHostToDevice,
                             stream_.get()),
             "rope table", "cudaMemcpyAsync");
  cuda_check(cudaStreamSynchronize(stream_.get()), "rope table", "cudaStreamSynchronize");  // before cos/sin go

  // ids, positions, logit rows (<= tokens each); sequence lengths, cu_seqlens and block tables.
  limits_.meta_capacity = 3 * max_tokens_ + 2 * max_seqs_ + 1 + max_seqs_ * max_table_width_;
  meta_ = DeviceMemory(limits_.meta_capacity * static_cast<int64_t>(sizeof(int32_t)), "workspace: step metadata");
  slots_ = DeviceMemory(max_tokens_ * static_cast<int64_t>(sizeof(int64_t)), "workspace: slot mapping");
}

template <typename T>
void CudaBackend<T>::allocate_kv_cache(const EngineOptions& options) {
  const ModelConfig& c = config_;
  const int64_t per_block =
      2 * c.num_hidden_layers * block_size_ * c.num_key_value_heads * c.head_dim * static_cast<int64_t>(sizeof(T));
  size_t free_bytes = 0, total_bytes = 0;
  cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), "sizing the KV cache", "cudaMemGetInfo");
  const int64_t budget = static_cast<int64_t>(static_cast<double>(free_bytes) * options.gpu_memory_fraction);
  int64_t blocks = budget / per_block;
  // More blocks than max_running full-length sequences hold can never be used.
  blocks = std::min(blocks, options.max_running * max_table_width_);
  if (options.max_kv_blocks > 0) blocks = std::min(blocks, options.max_kv_blocks);
  blocks = std::min(blocks, ((int64_t{1} << 31) - 1) / block_size_);  // the kernels' slot ids are int32
  if (blocks < 1) {
    throw Error(fmt::format("rollout cuda backend: the KV cache gets {} of the {} MiB free on {} ({} bytes), less than "
                            "one block of {} bytes; raise rollout.gpu_memory_fraction or free GPU memory",
                            options.gpu_memory_fraction, free_bytes >> 20, device_name_, budget, per_block));
  }
  kv_cache_ = DeviceMemory(blocks * per_block, "KV cache");
  // Zeroed once: a slot is always written before it is read, but a wrongly planned step
  // then reads zeros rather than leftovers of another process.
  cuda_check(cudaMemsetAsync(kv_cache_.as<void>(), 0, static_cast<size_t>(kv_cache_.bytes()), stream_.get()),
             "KV cache", "cudaMemsetAsync");
  const int64_t per_layer = blocks * block_size_ * c.num_key_value_heads * c.head_dim;  // elements, keys or values
  T* base = kv_cache_.as<T>();
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    kernels::PagedKvCache<T> cache;
    cache.key = base + (2 * layer) * per_layer;
    cache.value = base + (2 * layer + 1) * per_layer;
    cache.num_blocks = blocks;
    cache.block_size = block_size_;
    cache.num_kv_heads = c.num_key_value_heads;
    cache.head_dim = c.head_dim;
    cache_layers_.push_back(cache);
  }
  num_blocks_ = blocks;
  log::info("rollout cuda backend on {} ({}): weights {} MiB, KV cache {} blocks of {} tokens ({} MiB of {} MiB free)",
            device_name_, dtype_name<T>(), weight_bytes_ >> 20, blocks, block_size_, kv_cache_.bytes() >> 20,
            free_bytes >> 20);
}

template <typename T>
void CudaBackend<T>::plan(const ForwardBatch& batch) {
  plan_step(batch, limits_, plan_);
  // Pageable sources: each copy has read its host buffer when the call returns.
  cuda_check(cudaMemcpyAsync(meta_.as<int32_t>(), plan_.meta.data(), plan_.meta.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream_.get()),
             "uploading the step plan", "cudaMemcpyAsync");
  cuda_check(cudaMemcpyAsync(slots_.as<int64_t>(), plan_.slots.data(), plan_.slots.size() * sizeof(int64_t),
                             cudaMemcpyHostToDevice, stream_.get()),
             "uploading the step plan", "cudaMemcpyAsync");
}

template <typename T>
void CudaBackend<T>::gemm(const T* x, int64_t rows, int64_t in, const T* w, int64_t out, void* y,
                          cudaDataType_t y_type, const char* where) {
  TANDEM_CHECK(rows <= INT_MAX && in <= INT_MAX && out <= INT_MAX, "rollout cuda backend: {}: a [{}, {}] x [{}, {}]^T "
               "product is too large for cuBLAS's int sizes", where, rows, in, out, in);
  // cuBLAS is column-major: row-major y[rows, out] is column-major y^T[out, rows]
  // = w^T x^T, where row-major w[out, in] is the column-major [in, out] matrix taken
  // transposed (CUBLAS_OP_T) and row-major x[rows, in] is column-major x^T[in, rows].
  const float one = 1.0f, zero = 0.0f;
  cublas_check(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(rows),
                            static_cast<int>(in), &one, w, cuda_type<T>(), static_cast<int>(in), x, cuda_type<T>(),
                            static_cast<int>(in), &zero, y, y_type, static_cast<int>(out), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               where, "cublasGemmEx");
}

template <typename T>
void CudaBackend<T>::attention(int64_t layer, const T* q, int64_t q_stride) {
  const StepPlan& p = plan_;
  const int64_t heads = config_.num_attention_heads, q_size = config_.q_size();
  const int32_t* meta = meta_.as<int32_t>();
  T* out = attn_.as<T>();
  for (const DecodeGroup& g : p.decode_groups) {
    kernels::PagedSequences seqs;
    seqs.block_tables = meta + p.decode_tables_at + g.first * p.decode_width;
    seqs.seq_lens = meta + p.decode_lens_at + g.first;
    seqs.num_seqs = g.count;
    seqs.max_blocks_per_seq = p.decode_width;
    seqs.max_seq_len = g.max_seq_len;
    kernels::paged_decode_attention<T>(q + g.first * q_stride, q_stride, heads, cache_layers_[layer], seqs,
                                       attention_scale_, decode_workspace_.as<void>(), decode_workspace_.bytes(),
                                       out + g.first * q_size, stream_.get());
  }
  if (p.prefill_seqs > 0) {
    kernels::PagedSequences seqs;
    seqs.block_tables = meta + p.prefill_tables_at;
    seqs.seq_lens = meta + p.prefill_lens_at;
    seqs.num_seqs = p.prefill_seqs;
    seqs.max_blocks_per_seq = p.prefill_width;
    seqs.max_seq_len = p.prefill_max_seq_len;
    kernels::paged_prefill_attention<T>(q + p.decode_seqs * q_stride, q_stride, meta + p.prefill_cu_at,
                                        p.tokens - p.decode_seqs, p.prefill_max_q_len, heads, cache_layers_[layer],
                                        seqs, attention_scale_, out + p.decode_seqs * q_size, stream_.get());
  }
}

template <typename T>
void CudaBackend<T>::run_layer(int64_t layer) {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_[layer];
  const cudaStream_t stream = stream_.get();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t n = plan_.tokens, hidden = c.hidden_size, qs = c.q_size(), kvs = c.kv_size();
  const int64_t qkv_size = qs + 2 * kvs, inter = c.intermediate_size, e = static_cast<int64_t>(sizeof(T));
  T* residual = residual_.as<T>();
  T* h = hidden_.as<T>();
  T* y = y_.as<T>();
  T* qkv = qkv_.as<T>();

  // residual += the previous layer's MLP output (y); h = rms_norm(residual).
  if (layer == 0) {
    kernels::rms_norm<T>(residual, w.input_norm, n, hidden, eps, h, stream);
  } else {
    kernels::fused_add_rms_norm<T>(y, residual, w.input_norm, n, hidden, eps, h, stream);
  }
  gemm(h, n, hidden, w.qkv, qkv_size, qkv, cuda_type<T>(), "q|k|v projection");
  if (w.qkv_bias) cuda_ops::add_bias<T>(qkv, w.qkv_bias, n, qkv_size, stream);

  // q and k as strided views of the qkv rows, or, with per-head norms, normed copies.
  T* q = qkv;
  int64_t q_stride = qkv_size;
  T* k = qkv + qs;
  int64_t k_stride = qkv_size;
  const T* v = qkv + qs + kvs;
  if (c.qk_norm) {
    T* q_normed = q_normed_.as<T>();
    T* k_normed = k_normed_.as<T>();
    cuda_check(cudaMemcpy2DAsync(q_normed, qs * e, q, qkv_size * e, qs * e, n, cudaMemcpyDeviceToDevice, stream),
               "q norm", "cudaMemcpy2DAsync");
    cuda_check(cudaMemcpy2DAsync(k_normed, kvs * e, k, qkv_size * e, kvs * e, n, cudaMemcpyDeviceToDevice, stream),
               "k norm", "cudaMemcpy2DAsync");
    kernels::rms_norm<T>(q_normed, w.q_norm, n * c.num_attention_heads, c.head_dim, eps, q_normed, stream);
    kernels::rms_norm<T>(k_normed, w.k_norm, n * c.num_key_value_heads, c.head_dim, eps, k_normed, stream);
    q = q_normed;
    q_stride = qs;
    k = k_normed;
    k_stride = kvs;
  }
  const int32_t* meta = meta_.as<int32_t>();
  kernels::rope<T, int32_t>(q, q_stride, k, k_stride, meta + plan_.positions_at, rope_cos_.as<float>(),
                            rope_sin_.as<float>(), n, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                            c.max_position_embeddings, stream);
  kernels::kv_cache_append<T>(k, k_stride, v, qkv_size, slots_.as<int64_t>(), n, cache_layers_[layer], stream);
  attention(layer, q, q_stride);
  gemm(attn_.as<T>(), n, qs, w.o, hidden, y, cuda_type<T>(), "o projection");
  if (w.o_bias) cuda_ops::add_bias<T>(y, w.o_bias, n, hidden, stream);

  kernels::fused_add_rms_norm<T>(y, residual, w.post_norm, n, hidden, eps, h, stream);
  gemm(h, n, hidden, w.gate_up, 2 * inter, gate_up_.as<T>(), cuda_type<T>(), "gate|up projection");
  kernels::silu_mul<T>(gate_up_.as<T>(), n, inter, act_.as<T>(), stream);
  gemm(act_.as<T>(), n, inter, w.down, hidden, y, cuda_type<T>(), "down projection");
}

template <typename T>
void CudaBackend<T>::final_rows(std::vector<float>& logits) {
  // Only the logit rows get the last residual add, the final norm and the head, in passes
  // of max_rows_ rows (a step asks for one row per sequence; tests may ask for more).
  const ModelConfig& c = config_;
  const cudaStream_t stream = stream_.get();
  const int64_t hidden = c.hidden_size, vocab = c.vocab_size;
  const int32_t* rows = meta_.as<int32_t>() + plan_.rows_at;
  logits.resize(static_cast<size_t>(plan_.rows * vocab));
  for (int64_t first = 0; first < plan_.rows; first += max_rows_) {
    const int64_t count = std::min(max_rows_, plan_.rows - first);
    cuda_ops::gather_rows<T>(residual_.as<T>(), rows + first, count, hidden, rows_residual_.as<T>(), stream);
    cuda_ops::gather_rows<T>(y_.as<T>(), rows + first, count, hidden, rows_y_.as<T>(), stream);
    kernels::fused_add_rms_norm<T>(rows_y_.as<T>(), rows_residual_.as<T>(), final_norm_, count, hidden,
                                   static_cast<float>(c.rms_norm_eps), rows_y_.as<T>(), stream);
    gemm(rows_y_.as<T>(), count, hidden, lm_head_, vocab, logits_.as<float>(), CUDA_R_32F, "lm_head");
    // To pageable memory: returns once the copy is done, so logits_ is free for the next pass.
    cuda_check(cudaMemcpyAsync(logits.data() + first * vocab, logits_.as<float>(),
                               static_cast<size_t>(count * vocab) * sizeof(float), cudaMemcpyDeviceToHost, stream),
               "copying logits to the host", "cudaMemcpyAsync");
  }
}

template <typename T>
void CudaBackend<T>::copy_kv_blocks(const std::vector<KvBlockCopy>& copies) {
  use_device();
  const ModelConfig& c = config_;
  // A block's keys (or values) of one layer are contiguous: one copy per layer and kind.
  // (One 2D copy over the 2 x num_layers planes would do, but a plane can exceed the 2 GiB
  // pitch limit of 2D copies on a large cache; copies happen once per shared prompt block.)
  const int64_t block_elements = block_size_ * c.num_key_value_heads * c.head_dim;
  const size_t block_bytes = static_cast<size_t>(block_elements) * sizeof(T);
  for (const KvBlockCopy& copy : copies) {
    TANDEM_CHECK(copy.from >= 0 && copy.from < num_blocks_ && copy.to >= 0 && copy.to < num_blocks_,
                 "rollout cuda backend: KV block copy {} -> {} outside the cache's {} blocks", copy.from, copy.to,
                 num_blocks_);
    for (const kernels::PagedKvCache<T>& layer : cache_layers_) {
      for (T* plane : {layer.key, layer.value}) {
        cuda_check(cudaMemcpyAsync(plane + copy.to * block_elements, plane + copy.from * block_elements, block_bytes,
                                   cudaMemcpyDeviceToDevice, stream_.get()),
                   "copy-on-write of a shared KV block", "cudaMemcpyAsync");
      }
    }
  }
  // No synchronisation: the step's forward runs after the copies on the same stream.
}

template <typename T>
void CudaBackend<T>::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  use_device();
  plan(batch);
  const ModelConfig& c = config_;
  kernels::embedding<T>(meta_.as<int32_t>() + plan_.ids_at, embed_, plan_.tokens, c.vocab_size, c.hidden_size,
                        residual_.as<T>(), stream_.get());
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) run_layer(layer);
  final_rows(logits);
  // Also where a fault inside any kernel of the step surfaces.
  cuda_check(cudaStreamSynchronize(stream_.get()), "forward step", "cudaStreamSynchronize");
}

}  // namespace

std::unique_ptr<ModelBackend> make_cuda_backend(const ModelConfig& config, ModelWeights weights,
                                                const EngineOptions& options) {
  if (options.dtype == "bf16") return std::make_unique<CudaBackend<bf16>>(config, std::move(weights), options);
  if (options.dtype == "fp32") return std::make_unique<CudaBackend<float>>(config, std::move(weights), options);
  throw Error(fmt::format("rollout: dtype \"{}\" is not supported on cuda (allowed: bf16, fp32)", options.dtype));
}

}  // namespace tandem
