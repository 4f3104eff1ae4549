// Appends this step's keys and values to the paged cache: one block per token, 128-bit
// packs over the token's num_kv_heads * head_dim contiguous elements.
#include "kernels/attention_common.cuh"
#include "kernels/device_math.cuh"

namespace tandem::kernels {

namespace {

using device::load_pack;
using device::store_pack;

constexpr int kMaxThreads = 256;

template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxThreads)
    kv_cache_append_kernel(const T* k, int64_t k_stride, const T* v, int64_t v_stride, const int64_t* slot_mapping,
                           T* key_cache, T* value_cache, int64_t num_slots, int64_t row_elements) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0 || slot >= num_slots) return;
  const T* k_row = k + token * k_stride;
  const T* v_row = v + token * v_stride;
  T* k_dst = key_cache + slot * row_elements;
  T* v_dst = value_cache + slot * row_elements;
  for (int64_t p = threadIdx.x; p < row_elements / kVec; p += blockDim.x) {
    store_pack<T, kVec>(k_dst + p * kVec, load_pack<T, kVec>(k_row + p * kVec));
    store_pack<T, kVec>(v_dst + p * kVec, load_pack<T, kVec>(v_row + p * kVec));
  }
}

}  // namespace

template <typename T>
void kv_cache_append(const T* k, int64_t k_stride, const T* v, int64_t v_stride, const int64_t* slot_mapping,
                     int64_t tokens, const PagedKvCache<T>& cache, CudaStream stream) {
  check_paged_cache("kv_cache_append", cache);
  const int64_t row = cache.num_kv_heads * cache.head_dim;
  TANDEM_CHECK(tokens >= 0 && tokens <= kMaxGridX, "kv_cache_append: tokens must be in [0, {}], got {}", kMaxGridX,
               tokens);
  TANDEM_CHECK(k_stride >= row && v_stride >= row,
               "kv_cache_append: k_stride ({}) and v_stride ({}) must be >= num_kv_heads * head_dim = {}", k_stride,
               v_stride, row);
  if (tokens == 0) return;
  TANDEM_CHECK(k && v && slot_mapping, "kv_cache_append: null device pointer");
  constexpr int vec = 16 / sizeof(T);
  const bool packs = is_aligned(k, 16) && is_aligned(v, 16) && k_stride % vec == 0 && v_stride % vec == 0;
  const int64_t num_slots = cache.num_blocks * cache.block_size;
  if (packs) {  // row is a multiple of vec: every supported head_dim * sizeof(T) is 16 bytes or more
    kv_cache_append_kernel<T, vec><<<static_cast<unsigned>(tokens), block_threads_for(row / vec, kMaxThreads), 0, stream>>>(
        k, k_stride, v, v_stride, slot_mapping, cache.key, cache.value, num_slots, row);
  } else {
    kv_cache_append_kernel<T, 1><<<static_cast<unsigned>(tokens), block_threads_for(row, kMaxThreads), 0, stream>>>(
        k, k_stride, v, v_stride, slot_mapping, cache.key, cache.value, num_slots, row);
  }
  check_launch("kv_cache_append");
}

template void kv_cache_append<float>(const float*, int64_t, const float*, int64_t, const int64_t*, int64_t,
                                     const PagedKvCache<float>&, CudaStream);
template void kv_cache_append<__nv_bfloat16>(const __nv_bfloat16*, int64_t, const __nv_bfloat16*, int64_t,
                                             const int64_t*, int64_t, const PagedKvCache<__nv_bfloat16>&, CudaStream);

}  // namespace tandem::kernels
