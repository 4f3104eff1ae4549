// The CUDA rollout backend's forward step (rollout/cuda_backend.h describes the backend):
// the step plan's upload, each layer's kernels and cuBLAS GEMMs, paged attention, the
// logit rows copied to the host, and prefix sharing's KV block copies. The setup (device,
// memory, weight uploads) is in cuda_backend_setup.cpp; the class in cuda_backend_impl.h.
#include "rollout/cuda_backend_impl.h"

#include "core/error.h"
#include "kernels/norm_act.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"
#include "rollout/cuda_ops.h"
#include "rollout/cuda_step_plan.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

namespace tandem::cuda_backend {
namespace {

template <typename T>
cudaDataType_t cuda_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

}  // namespace

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
  const int64_t heads = local_.heads, q_size = q_size_;
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
  const int64_t n = plan_.tokens, hidden = c.hidden_size, qs = q_size_, kvs = kv_size_;
  const int64_t qkv_size = qs + 2 * kvs, inter = local_.intermediate, e = static_cast<int64_t>(sizeof(T));
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
    kernels::rms_norm<T>(q_normed, w.q_norm, n * local_.heads, c.head_dim, eps, q_normed, stream);
    kernels::rms_norm<T>(k_normed, w.k_norm, n * local_.kv_heads, c.head_dim, eps, k_normed, stream);
    q = q_normed;
    q_stride = qs;
    k = k_normed;
    k_stride = kvs;
  }
  const int32_t* meta = meta_.as<int32_t>();
  kernels::rope<T, int32_t>(q, q_stride, k, k_stride, meta + plan_.positions_at, rope_cos_.as<float>(),
                            rope_sin_.as<float>(), n, local_.heads, local_.kv_heads, c.head_dim,
                            c.max_position_embeddings, stream);
  kernels::kv_cache_append<T>(k, k_stride, v, qkv_size, slots_.as<int64_t>(), n, cache_layers_[layer], stream);
  attention(layer, q, q_stride);
  gemm(attn_.as<T>(), n, qs, w.o, hidden, y, cuda_type<T>(), "o projection");
  all_reduce(y, n * hidden);  // split: each rank's heads gave a partial sum; the bias is added once, after
  if (w.o_bias) cuda_ops::add_bias<T>(y, w.o_bias, n, hidden, stream);

  kernels::fused_add_rms_norm<T>(y, residual, w.post_norm, n, hidden, eps, h, stream);
  gemm(h, n, hidden, w.gate_up, 2 * inter, gate_up_.as<T>(), cuda_type<T>(), "gate|up projection");
  kernels::silu_mul<T>(gate_up_.as<T>(), n, inter, act_.as<T>(), stream);
  gemm(act_.as<T>(), n, inter, w.down, hidden, y, cuda_type<T>(), "down projection");
  all_reduce(y, n * hidden);  // split: a partial sum over the rank's MLP columns
}

template <typename T>
void CudaBackend<T>::all_reduce(T* data, int64_t count) {
  if (rank_.collectives) rank_.collectives->all_reduce_sum(data, count, !std::is_same_v<T, float>, stream_.get());
}

template <typename T>
void CudaBackend<T>::embed_tokens() {
  const ModelConfig& c = config_;
  const int32_t* ids = meta_.as<int32_t>() + plan_.ids_at;
  if (rank_.spec.size == 1) {
    kernels::embedding<T>(ids, embed_, plan_.tokens, c.vocab_size, c.hidden_size, residual_.as<T>(), stream_.get());
    return;
  }
  // Each rank writes the rows of the ids it holds and zeros elsewhere: the sum over the
  // group is every token's row, exactly (one term is not zero).
  const int64_t real_rows = std::clamp<int64_t>(c.vocab_size - local_.vocab_begin, 0, local_.vocab_rows);
  cuda_ops::embedding_rows<T>(ids, embed_, plan_.tokens, local_.vocab_begin, real_rows, c.hidden_size,
                              residual_.as<T>(), stream_.get());
  all_reduce(residual_.as<T>(), plan_.tokens * c.hidden_size);
}

template <typename T>
void CudaBackend<T>::final_rows(float* logits) {
  // Only the logit rows get the last residual add, the final norm and the head, in passes
  // of max_rows_ rows (a step asks for one row per sequence; tests may ask for more).
  // Split, each rank computes its vocabulary columns (padding rows included, zero), the
  // group gathers them, and rank 0 copies each rank's real columns into place.
  const ModelConfig& c = config_;
  const cudaStream_t stream = stream_.get();
  const int64_t hidden = c.hidden_size, width = c.head_rows();  // a classifier's labels in place of the vocabulary
  const int64_t ranks = rank_.spec.size;
  const int32_t* rows = meta_.as<int32_t>() + plan_.rows_at;
  for (int64_t first = 0; first < plan_.rows; first += max_rows_) {
    const int64_t count = std::min(max_rows_, plan_.rows - first);
    cuda_ops::gather_rows<T>(residual_.as<T>(), rows + first, count, hidden, rows_residual_.as<T>(), stream);
    cuda_ops::gather_rows<T>(y_.as<T>(), rows + first, count, hidden, rows_y_.as<T>(), stream);
    kernels::fused_add_rms_norm<T>(rows_y_.as<T>(), rows_residual_.as<T>(), final_norm_, count, hidden,
                                   static_cast<float>(c.rms_norm_eps), rows_y_.as<T>(), stream);
    gemm(rows_y_.as<T>(), count, hidden, lm_head_, head_cols_, logits_.as<float>(), CUDA_R_32F, "lm_head");
    const float* source = logits_.as<float>();
    if (ranks > 1) {
      rank_.collectives->all_gather(logits_.as<float>(), count * head_cols_, gathered_logits_.as<float>(), stream);
      source = gathered_logits_.as<float>();
    }
    if (!logits) continue;
    for (int64_t r = 0; r < ranks; ++r) {
      const int64_t begin = r * head_cols_, columns = std::clamp<int64_t>(width - begin, 0, head_cols_);
      if (columns == 0) continue;
      // To pageable memory: returns once the copy is done, so the buffers are free for the next pass.
      cuda_check(cudaMemcpy2DAsync(logits + first * width + begin, width * sizeof(float),
                                   source + r * count * head_cols_, head_cols_ * sizeof(float),
                                   columns * sizeof(float), count, cudaMemcpyDeviceToHost, stream),
                 "copying logits to the host", "cudaMemcpy2DAsync");
    }
  }
}

template <typename T>
void CudaBackend<T>::copy_kv_blocks(const std::vector<KvBlockCopy>& copies) {
  use_device();
  const ModelConfig& c = config_;
  // A block's keys (or values) of one layer are contiguous: one copy per layer and kind.
  // (One 2D copy over the 2 x num_layers planes would do, but a plane can exceed the 2 GiB
  // pitch limit of 2D copies on a large cache; copies happen once per shared prompt block.)
  const int64_t block_elements = block_size_ * local_.kv_heads * c.head_dim;
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
  TANDEM_CHECK(rank_.spec.size == 1, "rollout cuda backend: a tensor-parallel rank runs forward_rank");
  logits.resize(batch.logit_rows.size() * static_cast<size_t>(config_.head_rows()));
  forward_rank(batch, logits.data());
}

template <typename T>
void CudaBackend<T>::forward_rank(const ForwardBatch& batch, float* logits) {
  use_device();
  plan(batch);
  embed_tokens();
  for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) run_layer(layer);
  final_rows(logits);
  // Also where a fault inside any kernel of the step surfaces.
  cuda_check(cudaStreamSynchronize(stream_.get()), "forward step", "cudaStreamSynchronize");
}

// make_cuda_backend (cuda_backend_setup.cpp) constructs both dtypes: their vtables name these.
template void CudaBackend<float>::forward(const ForwardBatch& batch, std::vector<float>& logits);
template void CudaBackend<float>::forward_rank(const ForwardBatch& batch, float* logits);
template void CudaBackend<float>::copy_kv_blocks(const std::vector<KvBlockCopy>& copies);
template void CudaBackend<kernels::bf16>::forward(const ForwardBatch& batch, std::vector<float>& logits);
template void CudaBackend<kernels::bf16>::forward_rank(const ForwardBatch& batch, float* logits);
template void CudaBackend<kernels::bf16>::copy_kv_blocks(const std::vector<KvBlockCopy>& copies);

}  // namespace tandem::cuda_backend
