// cudasim.h: the first include of every `.cu` file that tools/cudasim/rewrite_cu.py has
// rewritten into C++. It turns CUDA's device vocabulary into calls on the simulated device
// (device.h): threadIdx & co. read the running fiber's view, __syncthreads and the warp
// collectives switch fibers, `<<<...>>>` (rewritten to cudasim::launch) hands the launch to
// the simulated runtime's stream. The rewriter has already replaced `__shared__`
// declarations; one left over fails to compile here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "device.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#define CUDASIM 1

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __constant__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ cudasim_error_a___shared___declaration_was_not_rewritten
#define __constant__ cudasim_error___constant___is_not_simulated

#define CUDASIM_SITE (::cudasim::Site{__FILE__, __LINE__})

#define threadIdx (::cudasim::device::view().thread_idx)
#define blockIdx (::cudasim::device::view().block_idx)
#define blockDim (::cudasim::device::view().block_dim)
#define gridDim (::cudasim::device::view().grid_dim)
#define warpSize 32

// ---- barriers and warp collectives ----------------------------------------------------
#define CUDASIM_BARRIER(kind, p) ::cudasim::device::barrier(::cudasim::device::BarrierKind::kind, (p), CUDASIM_SITE)
#define __syncthreads() ((void)CUDASIM_BARRIER(plain, 0))
#define __syncthreads_or(p) (static_cast<int>(CUDASIM_BARRIER(count_or, (p) != 0)))
#define __syncthreads_and(p) (static_cast<int>(CUDASIM_BARRIER(count_and, (p) != 0)))
#define __syncthreads_count(p) (static_cast<int>(CUDASIM_BARRIER(count, (p) != 0)))

namespace cudasim::device {
template <typename T>
T shuffle(WarpKind kind, Site site, unsigned mask, T value, int arg, int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "a warp shuffle moves up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  bits = warp_collective(kind, mask, bits, arg, width, site);
  T out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}
inline unsigned vote(WarpKind kind, Site site, unsigned mask, bool predicate) {
  return static_cast<unsigned>(warp_collective(kind, mask, predicate ? 1 : 0, 0, 32, site));
}
inline void syncwarp(Site site, unsigned mask = 0xffffffffu) { warp_collective(WarpKind::syncwarp, mask, 0, 0, 32, site); }
}  // namespace cudasim::device

#define __shfl_sync(mask, ...) ::cudasim::device::shuffle(::cudasim::device::WarpKind::shfl_idx, CUDASIM_SITE, mask, __VA_ARGS__)
#define __shfl_up_sync(mask, ...) ::cudasim::device::shuffle(::cudasim::device::WarpKind::shfl_up, CUDASIM_SITE, mask, __VA_ARGS__)
#define __shfl_down_sync(mask, ...) ::cudasim::device::shuffle(::cudasim::device::WarpKind::shfl_down, CUDASIM_SITE, mask, __VA_ARGS__)
#define __shfl_xor_sync(mask, ...) ::cudasim::device::shuffle(::cudasim::device::WarpKind::shfl_xor, CUDASIM_SITE, mask, __VA_ARGS__)
#define __ballot_sync(mask, p) ::cudasim::device::vote(::cudasim::device::WarpKind::ballot, CUDASIM_SITE, mask, (p) != 0)
#define __any_sync(mask, p) static_cast<int>(::cudasim::device::vote(::cudasim::device::WarpKind::any, CUDASIM_SITE, mask, (p) != 0))
#define __all_sync(mask, p) static_cast<int>(::cudasim::device::vote(::cudasim::device::WarpKind::all, CUDASIM_SITE, mask, (p) != 0))
#define __syncwarp(...) ::cudasim::device::syncwarp(CUDASIM_SITE, ##__VA_ARGS__)

// ---- shared memory (the rewriter's targets) ---------------------------------------------
namespace cudasim {
template <typename T>
T& shared_object(Site site) {
  return *static_cast<T*>(device::static_shared(sizeof(T), alignof(T), site));
}
template <typename T>
T* dynamic_shared(Site site) {
  return static_cast<T*>(device::dynamic_shared(alignof(T), site));
}
}  // namespace cudasim

// Where the kernels' packed-access helpers check alignment (kernels/device_math.cuh).
#define CUDASIM_CHECK_ALIGNED(pointer, alignment, what) \
  ::cudasim::device::check_aligned((pointer), (alignment), (what), CUDASIM_SITE)

// ---- launches -----------------------------------------------------------------------------
namespace cudasim {
// `kernel<<<grid, block, shared, stream>>>(args...)`: the arguments are copied now, as a
// launch copies them; the grid runs when the stream reaches it.
template <typename... P, typename... A>
void launch(const char* name, Site site, void (*kernel)(P...), dim3 grid, dim3 block, size_t dynamic_shared_bytes,
            cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  std::tuple<std::decay_t<P>...> copied(std::forward<A>(args)...);
  submit(Launch{name, site, reinterpret_cast<const void*>(kernel), grid, block, dynamic_shared_bytes, stream,
                [kernel, copied] { std::apply(kernel, copied); }});
}
}  // namespace cudasim

// ---- atomics: relaxed hardware atomics (blocks run one at a time; TSan sees atomics) -------
template <typename T>
inline T atomicAdd(T* p, T v) {
  if constexpr (std::is_integral_v<T>) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
  } else {
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, old + v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
  }
}
template <typename T>
inline T atomicMax(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
template <typename T>
inline T atomicExch(T* p, T v) {
  return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);
}
template <typename T>
inline T atomicCAS(T* p, T expected, T desired) {
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return expected;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- bit and math intrinsics (CUDA's device definitions, in host C++) -----------------------
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(unsigned u) { float x; std::memcpy(&x, &u, 4); return x; }
inline int __float_as_int(float x) { int u; std::memcpy(&u, &x, 4); return u; }
inline float __int_as_float(int u) { float x; std::memcpy(&x, &u, 4); return x; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
// Round to nearest even; NaN to 2^63 and saturating, as the PTX cvt.rni.u64.f32 does.
inline unsigned long long __float2ull_rn(float x) {
  if (std::isnan(x)) return 0x8000000000000000ull;
  if (x <= 0.0f) return 0;
  if (x >= 18446744073709551616.0f) return ~0ull;
  return static_cast<unsigned long long>(std::nearbyint(x));
}
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <typename T>
inline T __ldg(const T* p) { return *p; }
// CUDA's overloaded device min/max of mixed integer types.
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }
using std::isfinite;
using std::isinf;
using std::isnan;

// The host API's C++ overload for kernels (CUDA's own is only declared for nvcc).
template <typename... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attribute, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attribute, value);
}
