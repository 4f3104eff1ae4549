// The CUDA rollout backend's setup (rollout/cuda_backend.h describes the backend): the
// device, the weights' device memory (q|k|v and gate|up stacked, tied embeddings in one
// buffer) with their uploads and in-place updates, the step's workspace and rope tables,
// and the KV cache sized from the memory left. The forward step is in cuda_backend.cpp;
// the class in cuda_backend_impl.h.
#include "rollout/cuda_backend.h"
#include "rollout/cuda_backend_impl.h"
#include "rollout/cuda_tensor_parallel.h"

#include "core/error.h"
#include "core/half.h"
#include "core/log.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"
#include "rollout/engine.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <type_traits>

namespace tandem::cuda_backend {
namespace {

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

}  // namespace

template <typename T>
CudaBackend<T>::CudaBackend(const ModelConfig& config, ModelWeights weights, const EngineOptions& options,
                            const RankSetup& rank)
    : config_(config),
      rank_(rank),
      local_(local_sizes(config, rank.spec)),
      q_size_(local_.heads * config.head_dim),
      kv_size_(local_.kv_heads * config.head_dim),
      head_cols_(rank.spec.size == 1 ? config.head_rows() : local_.vocab_rows),
      device_(select_device(rank.device)),
      cublas_(stream_.get()) {
  const ModelConfig& c = config_;
  TANDEM_CHECK((rank.spec.size == 1) == (rank.collectives == nullptr),
               "rollout cuda backend: a split rank needs collectives, an unsplit one none");
  if (rank.spec.size == 1) check_weights(c, weights, "rollout engine");
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
  check_update(weights);
  TANDEM_CHECK(weights.tensors().size() == destinations_.size(), "rollout cuda backend: {} weight tensors for a "
               "shard of {}", weights.tensors().size(), destinations_.size());
  for (const WeightTensor& t : weights.tensors()) upload(t, "loading weights");
  allocate_workspace();
  allocate_kv_cache(options);
  limits_.vocab_size = c.vocab_size;
  limits_.max_positions = c.max_position_embeddings;
  limits_.block_size = block_size_;
  limits_.num_blocks = num_blocks_;
  limits_.max_tokens = max_tokens_;
  limits_.max_seqs = max_seqs_;
  const int64_t heads = local_.heads, head_dim = c.head_dim;
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
  const int64_t hidden = c.hidden_size, qs = q_size_, kvs = kv_size_, inter = local_.intermediate;
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
  T* embed = allocate_weight(local_.vocab_rows * hidden, "embed_tokens");
  bind("model.embed_tokens.weight", embed);
  T* final_norm = allocate_weight(hidden, "norm");
  bind("model.norm.weight", final_norm);
  embed_ = embed;
  final_norm_ = final_norm;
  if (c.num_labels > 0) {
    T* score = allocate_weight(c.num_labels * hidden, "score");  // a classifier's head
    bind("score.weight", score);
    lm_head_ = score;
  } else if (c.tie_word_embeddings) {
    lm_head_ = embed;  // one buffer: an update of the embeddings updates the head
  } else {
    T* lm_head = allocate_weight(local_.vocab_rows * hidden, "lm_head");
    bind("lm_head.weight", lm_head);
    lm_head_ = lm_head;
  }
  // Every tensor of the rank's shard has exactly one destination, with its shape.
  const std::vector<ParameterShard> layout = tensor_parallel_layout(c, rank_.spec);
  TANDEM_CHECK(layout.size() == destinations_.size(), "rollout cuda backend: {} destinations for {} tensors",
               destinations_.size(), layout.size());
  for (const ParameterShard& shard : layout) {
    auto it = destinations_.find(shard.name);
    TANDEM_CHECK(it != destinations_.end(), "rollout cuda backend: no destination for {}", shard.name);
    it->second.shape = shard.local_shape;
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
  check_update(update);  // everything before touching anything (as CpuModel::update_weights)
  use_device();
  for (const WeightTensor& t : update.tensors()) upload(t, "weight update");
}

template <typename T>
void CudaBackend<T>::check_update(const ModelWeights& update) const {
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
}

template <typename T>
void CudaBackend<T>::allocate_workspace() {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, qs = q_size_, kvs = kv_size_, inter = local_.intermediate;
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
  const int64_t logit_bytes = max_rows_ * head_cols_ * static_cast<int64_t>(sizeof(float));
  logits_ = DeviceMemory(logit_bytes, "workspace: logits");
  if (rank_.spec.size > 1) gathered_logits_ = DeviceMemory(rank_.spec.size * logit_bytes, "workspace: gathered logits");
  const int64_t decode_bytes = std::max(
      kernels::paged_decode_workspace_bytes(max_seqs_, local_.heads, c.head_dim,
                                            std::min(c.max_position_embeddings, kDecodeWorkspaceTokens)),
      kernels::paged_decode_workspace_bytes(1, local_.heads, c.head_dim, c.max_position_embeddings));
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
      2 * c.num_hidden_layers * block_size_ * local_.kv_heads * c.head_dim * static_cast<int64_t>(sizeof(T));
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
  const int64_t per_layer = blocks * block_size_ * local_.kv_heads * c.head_dim;  // elements, keys or values
  T* base = kv_cache_.as<T>();
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    kernels::PagedKvCache<T> cache;
    cache.key = base + (2 * layer) * per_layer;
    cache.value = base + (2 * layer + 1) * per_layer;
    cache.num_blocks = blocks;
    cache.block_size = block_size_;
    cache.num_kv_heads = local_.kv_heads;
    cache.head_dim = c.head_dim;
    cache_layers_.push_back(cache);
  }
  num_blocks_ = blocks;
  const std::string rank =
      rank_.spec.size == 1 ? "" : fmt::format(", tensor-parallel rank {} of {}", rank_.spec.rank, rank_.spec.size);
  log::info("rollout cuda backend on {} ({}{}): weights {} MiB, KV cache {} blocks of {} tokens ({} MiB of {} MiB free)",
            device_name_, dtype_name<T>(), rank, weight_bytes_ >> 20, blocks, block_size_, kv_cache_.bytes() >> 20,
            free_bytes >> 20);
}

// Every member defined here, for both dtypes (the forward step's are in cuda_backend.cpp).
template class CudaBackend<float>;
template class CudaBackend<kernels::bf16>;

}  // namespace tandem::cuda_backend

namespace tandem {

namespace {

using cuda_backend::CudaBackend;
using kernels::bf16;

}  // namespace

std::unique_ptr<ModelBackend> make_cuda_backend(const ModelConfig& config, ModelWeights weights,
                                                const EngineOptions& options) {
  if (options.dtype != "bf16" && options.dtype != "fp32") {
    throw Error(fmt::format("rollout: dtype \"{}\" is not supported on cuda (allowed: bf16, fp32)", options.dtype));
  }
  if (options.tensor_parallel > 1) return make_cuda_tensor_parallel_backend(config, weights, options);
  const cuda_backend::RankSetup whole{{1, 0}, options.cuda_device, nullptr};
  if (options.dtype == "bf16") return std::make_unique<CudaBackend<bf16>>(config, std::move(weights), options, whole);
  return std::make_unique<CudaBackend<float>>(config, std::move(weights), options, whole);
}

}  // namespace tandem
