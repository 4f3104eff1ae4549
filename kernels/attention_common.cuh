// Shared by the paged attention kernels (private to kernels/*.cu): the host-side shape
// checks and the device-side address of a cached token.
#pragma once

#include "kernels/launch_check.h"
#include "kernels/paged_attention.h"

#include <algorithm>
#include <iterator>

namespace tandem::kernels {

template <typename T>
void check_paged_cache(const char* what, const PagedKvCache<T>& cache) {
  TANDEM_CHECK(cache.key != nullptr && cache.value != nullptr, "{}: null cache pointer", what);
  TANDEM_CHECK(is_aligned(cache.key, 16) && is_aligned(cache.value, 16), "{}: cache pointers must be 16-byte aligned",
               what);
  TANDEM_CHECK(cache.num_blocks > 0 && cache.block_size > 0, "{}: cache needs blocks > 0 and block_size > 0, got {} and {}",
               what, cache.num_blocks, cache.block_size);
  TANDEM_CHECK(cache.num_kv_heads > 0, "{}: num_kv_heads must be > 0, got {}", what, cache.num_kv_heads);
  TANDEM_CHECK(std::find(std::begin(kAttentionHeadDims), std::end(kAttentionHeadDims), cache.head_dim) !=
                   std::end(kAttentionHeadDims),
               "{}: head_dim {} is not supported (supported: 8, 16, 32, 64, 128, 256)", what, cache.head_dim);
  // Slots are addressed with 64-bit offsets, positions with 32-bit ints.
  TANDEM_CHECK(cache.num_blocks * cache.block_size <= (int64_t{1} << 31) - 1, "{}: {} blocks of {} slots is too many",
               what, cache.num_blocks, cache.block_size);
}

template <typename T>
void check_paged_sequences(const char* what, const PagedSequences& seqs, const PagedKvCache<T>& cache,
                           int64_t num_q_heads) {
  TANDEM_CHECK(num_q_heads > 0 && num_q_heads % cache.num_kv_heads == 0,
               "{}: num_q_heads ({}) must be a positive multiple of num_kv_heads ({})", what, num_q_heads,
               cache.num_kv_heads);
  TANDEM_CHECK(seqs.num_seqs >= 0, "{}: num_seqs must be >= 0, got {}", what, seqs.num_seqs);
  TANDEM_CHECK(seqs.max_blocks_per_seq > 0, "{}: max_blocks_per_seq must be > 0, got {}", what,
               seqs.max_blocks_per_seq);
  TANDEM_CHECK(seqs.max_seq_len >= 0 && seqs.max_seq_len <= seqs.max_blocks_per_seq * cache.block_size,
               "{}: max_seq_len {} must be in [0, max_blocks_per_seq * block_size = {}]", what, seqs.max_seq_len,
               seqs.max_blocks_per_seq * cache.block_size);
  if (seqs.num_seqs > 0) {
    TANDEM_CHECK(seqs.block_tables != nullptr && seqs.seq_lens != nullptr, "{}: null block_tables or seq_lens", what);
  }
}

namespace device {

// Element offset of (position, kv_head) in a cache tensor, or -1 when the block table
// entry is not a block of the cache.
__device__ __forceinline__ int64_t paged_offset(const int32_t* table, int position, int block_size, int num_blocks,
                                                int num_kv_heads, int kv_head, int head_dim) {
  const int block = table[position / block_size];
  if (block < 0 || block >= num_blocks) return -1;
  const int64_t slot = static_cast<int64_t>(block) * block_size + position % block_size;
  return (slot * num_kv_heads + kv_head) * head_dim;
}

}  // namespace device

}  // namespace tandem::kernels
