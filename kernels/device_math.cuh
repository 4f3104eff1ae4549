// Device helpers of the kernels (private to kernels/*.cu): fp32 <-> storage conversion,
// packed 16-byte accesses, warp and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels::device {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);  // round to nearest even, NaN kept
}

// N consecutive elements moved as one access: 16 bytes (LDG.128) when N * sizeof(T) == 16.
// Alignment is capped at 16 so a 32-byte pack needs only 16-byte aligned addresses (two loads).
template <typename T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Pack {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
#ifdef CUDASIM  // a misaligned LDG.128 faults on the GPU; on the CPU it would pass unnoticed
  CUDASIM_CHECK_ALIGNED(p, alignof(Pack<T, N>), "load_pack");
#endif
  return *reinterpret_cast<const Pack<T, N>*>(p);
}
template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& pack) {
#ifdef CUDASIM
  CUDASIM_CHECK_ALIGNED(p, alignof(Pack<T, N>), "store_pack");
#endif
  *reinterpret_cast<Pack<T, N>*>(p) = pack;
}

// Full-warp reductions: every lane must call them, every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
// fmaxf drops a NaN operand; callers that must see NaN propagate it through a sum instead.
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Block reductions for blocks whose size is a multiple of 32. Every thread must call them
// (they contain barriers); every thread gets the result. `scratch`: 32 floats of shared
// memory, reusable right away by the next call (each call starts with a barrier).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

}  // namespace tandem::kernels::device
