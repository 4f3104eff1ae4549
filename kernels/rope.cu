// Rotary embedding: one block per token, one thread per (head, i < head_dim/2) pair, so
// each thread owns both elements it rewrites and no barrier is needed.
#include "kernels/rope.h"

#include "kernels/device_math.cuh"
#include "kernels/launch_check.h"

namespace tandem::kernels {

namespace {

using device::from_float;
using device::to_float;

constexpr int kMaxThreads = 512;

template <typename T, typename P>
__global__ void __launch_bounds__(kMaxThreads)
    rope_kernel(T* q, int64_t q_stride, T* k, int64_t k_stride, const P* positions, const float* cos,
                const float* sin, int num_q_heads, int num_kv_heads, int head_dim, int64_t max_positions) {
  const int64_t token = blockIdx.x;
  const int half = head_dim / 2;
  const int64_t position = static_cast<int64_t>(positions[token]);
  const bool valid = position >= 0 && position < max_positions;
  const float* c = cos + (valid ? position : 0) * half;
  const float* s = sin + (valid ? position : 0) * half;
  const int pairs = (num_q_heads + num_kv_heads) * half;
  for (int item = threadIdx.x; item < pairs; item += blockDim.x) {
    const int head = item / half, i = item % half;
    T* v = head < num_q_heads ? q + token * q_stride + static_cast<int64_t>(head) * head_dim
                              : k + token * k_stride + static_cast<int64_t>(head - num_q_heads) * head_dim;
    const float ci = valid ? c[i] : NAN, si = valid ? s[i] : NAN;
    const float x1 = to_float(v[i]), x2 = to_float(v[i + half]);
    v[i] = from_float<T>(x1 * ci - x2 * si);
    v[i + half] = from_float<T>(x2 * ci + x1 * si);
  }
}

}  // namespace

template <typename T, typename P>
void rope(T* q, int64_t q_stride, T* k, int64_t k_stride, const P* positions, const float* cos, const float* sin,
          int64_t tokens, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, int64_t max_positions,
          CudaStream stream) {
  TANDEM_CHECK(tokens >= 0 && tokens <= kMaxGridX, "rope: tokens must be in [0, {}], got {}", kMaxGridX, tokens);
  TANDEM_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even and > 0, got {}", head_dim);
  TANDEM_CHECK(num_q_heads > 0 && num_kv_heads > 0, "rope: head counts must be > 0, got q {} kv {}", num_q_heads,
               num_kv_heads);
  TANDEM_CHECK((num_q_heads + num_kv_heads) * (head_dim / 2) <= (int64_t{1} << 30), "rope: too many heads ({} + {})",
               num_q_heads, num_kv_heads);
  TANDEM_CHECK(q_stride >= num_q_heads * head_dim, "rope: q_stride {} is less than num_q_heads * head_dim = {}",
               q_stride, num_q_heads * head_dim);
  TANDEM_CHECK(k_stride >= num_kv_heads * head_dim, "rope: k_stride {} is less than num_kv_heads * head_dim = {}",
               k_stride, num_kv_heads * head_dim);
  TANDEM_CHECK(max_positions > 0, "rope: max_positions must be > 0, got {}", max_positions);
  if (tokens == 0) return;
  TANDEM_CHECK(q && k && positions && cos && sin, "rope: null device pointer");
  const int threads = block_threads_for((num_q_heads + num_kv_heads) * (head_dim / 2), kMaxThreads);
  rope_kernel<T, P><<<static_cast<unsigned>(tokens), threads, 0, stream>>>(
      q, q_stride, k, k_stride, positions, cos, sin, static_cast<int>(num_q_heads), static_cast<int>(num_kv_heads),
      static_cast<int>(head_dim), max_positions);
  check_launch("rope");
}

#define TANDEM_INSTANTIATE_ROPE(T, P)                                                                          \
  template void rope<T, P>(T*, int64_t, T*, int64_t, const P*, const float*, const float*, int64_t, int64_t, \
                           int64_t, int64_t, int64_t, CudaStream);
TANDEM_INSTANTIATE_ROPE(float, int32_t)
TANDEM_INSTANTIATE_ROPE(float, int64_t)
TANDEM_INSTANTIATE_ROPE(__nv_bfloat16, int32_t)
TANDEM_INSTANTIATE_ROPE(__nv_bfloat16, int64_t)
#undef TANDEM_INSTANTIATE_ROPE

}  // namespace tandem::kernels
