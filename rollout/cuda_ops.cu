#include "rollout/cuda_ops.h"

#include "kernels/launch_check.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace tandem::cuda_ops {

namespace {

using kernels::check_launch;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `count` elements.
unsigned grid_for(int64_t count) {
  return static_cast<unsigned>(std::min<int64_t>((count + kThreads - 1) / kThreads, int64_t{1} << 16));
}

template <typename T>
__global__ void add_bias_kernel(T* x, const T* bias, int64_t rows, int64_t dim) {
  const int64_t count = rows * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    store(&x[i], to_float(x[i]) + to_float(bias[i % dim]));
  }
}

template <typename T>
__global__ void gather_rows_kernel(const T* x, const int32_t* rows, int64_t count, int64_t dim, T* out) {
  const int64_t total = count * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim, d = i % dim;
    out[i] = x[static_cast<int64_t>(rows[r]) * dim + d];
  }
}

template <typename T>
__global__ void embedding_rows_kernel(const int32_t* ids, const T* table, int64_t tokens, int64_t first, int64_t rows,
                                      int64_t dim, T* out) {
  const int64_t total = tokens * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = static_cast<int64_t>(ids[i / dim]) - first;
    store(&out[i], row >= 0 && row < rows ? to_float(table[row * dim + i % dim]) : 0.0f);  // exact either way
  }
}

}  // namespace

template <typename T>
void add_bias(T* x, const T* bias, int64_t rows, int64_t dim, kernels::CudaStream stream) {
  TANDEM_CHECK(rows >= 0 && dim > 0, "add_bias: rows {} and dim {} must be >= 0 and > 0", rows, dim);
  if (rows == 0) return;
  TANDEM_CHECK(x != nullptr && bias != nullptr, "add_bias: null device pointer");
  add_bias_kernel<T><<<grid_for(rows * dim), kThreads, 0, stream>>>(x, bias, rows, dim);
  check_launch("add_bias");
}

template <typename T>
void gather_rows(const T* x, const int32_t* rows, int64_t count, int64_t dim, T* out, kernels::CudaStream stream) {
  TANDEM_CHECK(count >= 0 && dim > 0, "gather_rows: count {} and dim {} must be >= 0 and > 0", count, dim);
  if (count == 0) return;
  TANDEM_CHECK(x != nullptr && rows != nullptr && out != nullptr, "gather_rows: null device pointer");
  gather_rows_kernel<T><<<grid_for(count * dim), kThreads, 0, stream>>>(x, rows, count, dim, out);
  check_launch("gather_rows");
}

template <typename T>
void embedding_rows(const int32_t* ids, const T* table, int64_t tokens, int64_t first, int64_t rows, int64_t dim,
                    T* out, kernels::CudaStream stream) {
  TANDEM_CHECK(tokens >= 0 && first >= 0 && rows >= 0 && dim > 0,
               "embedding_rows: tokens {}, first {}, rows {}, dim {}: none may be negative and dim must be > 0", tokens,
               first, rows, dim);
  if (tokens == 0) return;
  TANDEM_CHECK(ids != nullptr && out != nullptr && (rows == 0 || table != nullptr), "embedding_rows: null device pointer");
  embedding_rows_kernel<T><<<grid_for(tokens * dim), kThreads, 0, stream>>>(ids, table, tokens, first, rows, dim, out);
  check_launch("embedding_rows");
}

template void add_bias<float>(float*, const float*, int64_t, int64_t, kernels::CudaStream);
template void add_bias<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int64_t, int64_t, kernels::CudaStream);
template void gather_rows<float>(const float*, const int32_t*, int64_t, int64_t, float*, kernels::CudaStream);
template void gather_rows<__nv_bfloat16>(const __nv_bfloat16*, const int32_t*, int64_t, int64_t, __nv_bfloat16*,
                                         kernels::CudaStream);
template void embedding_rows<float>(const int32_t*, const float*, int64_t, int64_t, int64_t, int64_t, float*,
                                    kernels::CudaStream);
template void embedding_rows<__nv_bfloat16>(const int32_t*, const __nv_bfloat16*, int64_t, int64_t, int64_t, int64_t,
                                            __nv_bfloat16*, kernels::CudaStream);

}  // namespace tandem::cuda_ops
