// RMSNorm, fused residual-add RMSNorm, SiLU-and-multiply and embedding gather.
// One block per row: rows are a few thousand elements, so a block's threads cover a row
// in one or two packs each and the row's sum of squares is one block reduction.
#include "kernels/norm_act.h"

#include "kernels/device_math.cuh"
#include "kernels/launch_check.h"

#include <cmath>

namespace tandem::kernels {

namespace {

using device::from_float;
using device::load_pack;
using device::Pack;
using device::store_pack;
using device::to_float;

constexpr int kMaxThreads = 1024;

template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_kernel(const T* x, const T* weight, int64_t dim, float eps, T* out) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  T* yr = out + row * dim;
  const int64_t packs = dim / kVec;
  float sum_sq = 0;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, kVec> v = load_pack<T, kVec>(xr + p * kVec);
#pragma unroll
    for (int e = 0; e < kVec; ++e) sum_sq += to_float(v.v[e]) * to_float(v.v[e]);
  }
  const float scale = rsqrtf(device::block_sum(sum_sq, scratch) / static_cast<float>(dim) + eps);
  // Each thread rewrites exactly the packs it read, so out == x is safe.
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, kVec> v = load_pack<T, kVec>(xr + p * kVec);
    const Pack<T, kVec> w = load_pack<T, kVec>(weight + p * kVec);
    Pack<T, kVec> y;
#pragma unroll
    for (int e = 0; e < kVec; ++e) y.v[e] = from_float<T>(to_float(v.v[e]) * scale * to_float(w.v[e]));
    store_pack<T, kVec>(yr + p * kVec, y);
  }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxThreads)
    fused_add_rms_norm_kernel(const T* x, T* residual, const T* weight, int64_t dim, float eps, T* out) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  T* rr = residual + row * dim;
  T* yr = out + row * dim;
  const int64_t packs = dim / kVec;
  float sum_sq = 0;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, kVec> a = load_pack<T, kVec>(xr + p * kVec);
    Pack<T, kVec> r = load_pack<T, kVec>(rr + p * kVec);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      r.v[e] = from_float<T>(to_float(a.v[e]) + to_float(r.v[e]));
      const float stored = to_float(r.v[e]);  // the norm sees what the residual stream keeps
      sum_sq += stored * stored;
    }
    store_pack<T, kVec>(rr + p * kVec, r);
  }
  const float scale = rsqrtf(device::block_sum(sum_sq, scratch) / static_cast<float>(dim) + eps);
  // Same packs per thread as above: each thread reads back only its own residual writes.
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, kVec> r = load_pack<T, kVec>(rr + p * kVec);
    const Pack<T, kVec> w = load_pack<T, kVec>(weight + p * kVec);
    Pack<T, kVec> y;
#pragma unroll
    for (int e = 0; e < kVec; ++e) y.v[e] = from_float<T>(to_float(r.v[e]) * scale * to_float(w.v[e]));
    store_pack<T, kVec>(yr + p * kVec, y);
  }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxThreads) silu_mul_kernel(const T* gate_up, int64_t dim, T* out) {
  const int64_t row = blockIdx.x;
  const T* gate = gate_up + row * 2 * dim;
  const T* up = gate + dim;
  T* yr = out + row * dim;
  for (int64_t p = threadIdx.x; p < dim / kVec; p += blockDim.x) {
    const Pack<T, kVec> g = load_pack<T, kVec>(gate + p * kVec);
    const Pack<T, kVec> u = load_pack<T, kVec>(up + p * kVec);
    Pack<T, kVec> y;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float gf = to_float(g.v[e]);
      // expf(-g) overflows to inf for g < -88: g / inf = -0, the right limit.
      y.v[e] = from_float<T>(gf / (1.0f + expf(-gf)) * to_float(u.v[e]));
    }
    store_pack<T, kVec>(yr + p * kVec, y);
  }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxThreads)
    embedding_kernel(const int32_t* ids, const T* table, int64_t vocab, int64_t dim, T* out) {
  const int64_t token = blockIdx.x;
  const int64_t id = ids[token];
  const bool valid = id >= 0 && id < vocab;
  const T* src = table + (valid ? id : 0) * dim;
  T* dst = out + token * dim;
  Pack<T, kVec> nan_pack;
#pragma unroll
  for (int e = 0; e < kVec; ++e) nan_pack.v[e] = from_float<T>(NAN);
  for (int64_t p = threadIdx.x; p < dim / kVec; p += blockDim.x) {
    store_pack<T, kVec>(dst + p * kVec, valid ? load_pack<T, kVec>(src + p * kVec) : nan_pack);
  }
}

// 128-bit packs when every pointer is 16-byte aligned and rows are whole packs.
template <typename T>
bool can_use_packs(int64_t row_elements, std::initializer_list<const void*> pointers) {
  constexpr int64_t vec = 16 / sizeof(T);
  if (row_elements % vec != 0) return false;
  for (const void* p : pointers) {
    if (!is_aligned(p, 16)) return false;
  }
  return true;
}

void check_rows(const char* what, int64_t rows, int64_t dim) {
  TANDEM_CHECK(rows >= 0 && rows <= kMaxGridX, "{}: rows must be in [0, {}], got {}", what, kMaxGridX, rows);
  TANDEM_CHECK(dim > 0, "{}: dim must be > 0, got {}", what, dim);
}

void check_pointers(const char* what, std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) TANDEM_CHECK(p != nullptr, "{}: null device pointer", what);
}

}  // namespace

template <typename T>
void rms_norm(const T* x, const T* weight, int64_t rows, int64_t dim, float eps, T* out, CudaStream stream) {
  check_rows("rms_norm", rows, dim);
  TANDEM_CHECK(std::isfinite(eps) && eps >= 0, "rms_norm: eps must be finite and >= 0, got {}", eps);
  if (rows == 0) return;
  check_pointers("rms_norm", {x, weight, out});
  constexpr int vec = 16 / sizeof(T);
  if (can_use_packs<T>(dim, {x, weight, out})) {
    rms_norm_kernel<T, vec><<<static_cast<unsigned>(rows), block_threads_for(dim / vec, kMaxThreads), 0, stream>>>(x, weight, dim, eps, out);
  } else {
    rms_norm_kernel<T, 1><<<static_cast<unsigned>(rows), block_threads_for(dim, kMaxThreads), 0, stream>>>(x, weight, dim, eps, out);
  }
  check_launch("rms_norm");
}

template <typename T>
void fused_add_rms_norm(const T* x, T* residual, const T* weight, int64_t rows, int64_t dim, float eps, T* out,
                        CudaStream stream) {
  check_rows("fused_add_rms_norm", rows, dim);
  TANDEM_CHECK(std::isfinite(eps) && eps >= 0, "fused_add_rms_norm: eps must be finite and >= 0, got {}", eps);
  if (rows == 0) return;
  check_pointers("fused_add_rms_norm", {x, residual, weight, out});
  TANDEM_CHECK(out != residual, "fused_add_rms_norm: out must not be residual (residual keeps the sum)");
  constexpr int vec = 16 / sizeof(T);
  if (can_use_packs<T>(dim, {x, residual, weight, out})) {
    fused_add_rms_norm_kernel<T, vec>
        <<<static_cast<unsigned>(rows), block_threads_for(dim / vec, kMaxThreads), 0, stream>>>(x, residual, weight, dim, eps, out);
  } else {
    fused_add_rms_norm_kernel<T, 1>
        <<<static_cast<unsigned>(rows), block_threads_for(dim, kMaxThreads), 0, stream>>>(x, residual, weight, dim, eps, out);
  }
  check_launch("fused_add_rms_norm");
}

template <typename T>
void silu_mul(const T* gate_up, int64_t rows, int64_t dim, T* out, CudaStream stream) {
  check_rows("silu_mul", rows, dim);
  if (rows == 0) return;
  check_pointers("silu_mul", {gate_up, out});
  constexpr int vec = 16 / sizeof(T);
  if (can_use_packs<T>(dim, {gate_up, out})) {
    silu_mul_kernel<T, vec><<<static_cast<unsigned>(rows), block_threads_for(dim / vec, kMaxThreads), 0, stream>>>(gate_up, dim, out);
  } else {
    silu_mul_kernel<T, 1><<<static_cast<unsigned>(rows), block_threads_for(dim, kMaxThreads), 0, stream>>>(gate_up, dim, out);
  }
  check_launch("silu_mul");
}

template <typename T>
void embedding(const int32_t* ids, const T* table, int64_t tokens, int64_t vocab, int64_t dim, T* out,
               CudaStream stream) {
  check_rows("embedding", tokens, dim);
  TANDEM_CHECK(vocab > 0, "embedding: vocab must be > 0, got {}", vocab);
  if (tokens == 0) return;
  check_pointers("embedding", {ids, table, out});
  constexpr int vec = 16 / sizeof(T);
  if (can_use_packs<T>(dim, {table, out})) {
    embedding_kernel<T, vec><<<static_cast<unsigned>(tokens), block_threads_for(dim / vec, kMaxThreads), 0, stream>>>(ids, table, vocab, dim, out);
  } else {
    embedding_kernel<T, 1><<<static_cast<unsigned>(tokens), block_threads_for(dim, kMaxThreads), 0, stream>>>(ids, table, vocab, dim, out);
  }
  check_launch("embedding");
}

#define TANDEM_INSTANTIATE_NORM_ACT(T)                                                                   \
  template void rms_norm<T>(const T*, const T*, int64_t, int64_t, float, T*, CudaStream);               \
  template void fused_add_rms_norm<T>(const T*, T*, const T*, int64_t, int64_t, float, T*, CudaStream); \
  template void silu_mul<T>(const T*, int64_t, int64_t, T*, CudaStream);                                \
  template void embedding<T>(const int32_t*, const T*, int64_t, int64_t, int64_t, T*, CudaStream);
TANDEM_INSTANTIATE_NORM_ACT(float)
TANDEM_INSTANTIATE_NORM_ACT(__nv_bfloat16)
#undef TANDEM_INSTANTIATE_NORM_ACT

}  // namespace tandem::kernels
