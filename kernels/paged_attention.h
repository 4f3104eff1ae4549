// Attention over the paged KV cache for the CUDA rollout backend.
//
// Cache layout: rollout/kv_cache.h's plan in device memory. Per layer, keys and values are
// each [num_blocks, block_size, num_kv_heads, head_dim]; a sequence's token at position p
// lives in block block_tables[s][p / block_size], slot p % block_size. A token's flat slot
// (slot_mapping) is block * block_size + p % block_size.
//
// One step of the backend: project q/k/v, rope, kv_cache_append this step's keys and
// values, then attend over the cache, where every key of a sequence now lives:
// - decode (one new token per sequence): paged_decode_attention, split-K over the
//   context (flash-decoding) so that a few long sequences still fill the GPU;
// - prefill (several new tokens per sequence): paged_prefill_attention, causal, with the
//   sequence's earlier tokens already in the cache. Reading keys from the cache rather
//   than from contiguous k/v makes a first prefill, a chunked prefill (prompt split over
//   steps) and a prefix-cache hit the same call.
//
// Grouped-query attention: num_q_heads is a multiple of num_kv_heads; query head h reads
// kv head h / (num_q_heads / num_kv_heads). head_dim is one of kAttentionHeadDims.
// T is float or bf16 (fp32 scores, softmax and accumulation). Cache pointers must be
// 16-byte aligned. Launchers check shapes and throw tandem::Error; values held on the
// device are checked where they are read: a sequence whose length or block ids are out of
// range gets NaN outputs (never a read outside the cache), so a broken plan is loud.
// Float64 references: kernels/reference/attention_reference.h.
#pragma once

#include "kernels/kernel_types.h"

#include <cstdint>

namespace tandem::kernels {

// The head sizes the attention kernels are compiled for (8 and 16: the test models).
inline constexpr int64_t kAttentionHeadDims[] = {8, 16, 32, 64, 128, 256};

// Decode attention splits each context into partitions of this many tokens.
inline constexpr int64_t kDecodePartitionTokens = 512;

// One layer of the paged KV cache.
template <typename T>
struct PagedKvCache {
  T* key = nullptr;    // [num_blocks, block_size, num_kv_heads, head_dim]
  T* value = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  int64_t num_blocks = 0;
  int64_t block_size = 0;  // token slots per block
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
};

// The sequences of one step and where their tokens live.
struct PagedSequences {
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  const int32_t* seq_lens = nullptr;      // [num_seqs]: tokens in the cache, this step's included
  int64_t num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  int64_t max_seq_len = 0;  // host-side bound on seq_lens (sizes the grid); <= max_blocks_per_seq * block_size
};

// cache.key/value[slot_mapping[t]] = k/v[t] for every head. A negative slot is padding and
// is skipped; so is a slot past the cache (num_blocks * block_size), which is never written.
// One block per token.
template <typename T>
void kv_cache_append(const T* k,                    // [tokens, num_kv_heads, head_dim], rows k_stride apart
                     int64_t k_stride,
                     const T* v,                    // [tokens, num_kv_heads, head_dim], rows v_stride apart
                     int64_t v_stride,
                     const int64_t* slot_mapping,   // [tokens]
                     int64_t tokens,
                     const PagedKvCache<T>& cache,
                     CudaStream stream);

// Bytes of fp32 workspace paged_decode_attention needs: the per-partition outputs, maxima
// and sums of split-K. 0 when no context spans more than one partition.
int64_t paged_decode_workspace_bytes(int64_t num_seqs, int64_t num_q_heads, int64_t head_dim, int64_t max_seq_len);

// out[s, h] = softmax(scale * q[s, h] . K_s^T) V_s over the seq_lens[s] cached tokens of
// sequence s (its newest token included: append first). Split-K: grid (sequence, head
// group, partition of kDecodePartitionTokens); each block scores its partition for up to
// 8 query heads sharing one kv head, then a reduce kernel merges the partitions' (max,
// sum, output) when there is more than one. A sequence of length 0 gets zeros.
template <typename T>
void paged_decode_attention(const T* q,                     // [num_seqs, num_q_heads, head_dim], rows q_stride apart
                            int64_t q_stride,
                            int64_t num_q_heads,
                            const PagedKvCache<T>& cache,
                            const PagedSequences& seqs,
                            float scale,                    // usually 1 / sqrt(head_dim)
                            void* workspace,                // paged_decode_workspace_bytes(...) bytes, or null when 0
                            int64_t workspace_bytes,
                            T* out,                         // [num_seqs, num_q_heads, head_dim]
                            CudaStream stream);

// Causal attention for this step's new tokens of each sequence, packed: sequence s owns
// q rows [cu_seqlens_q[s], cu_seqlens_q[s + 1]), its last q_len_s cached tokens, so its
// new token i sits at position seq_lens[s] - q_len_s + i and attends to positions
// 0 ..= that. Online softmax over key tiles of 32 read from the cache; a block handles 16
// (token, query head) rows of one kv head, so grouped heads share each loaded key tile.
template <typename T>
void paged_prefill_attention(const T* q,                     // [total_tokens, num_q_heads, head_dim], rows q_stride apart
                             int64_t q_stride,
                             const int32_t* cu_seqlens_q,    // [num_seqs + 1], cu_seqlens_q[0] = 0
                             int64_t total_tokens,
                             int64_t max_q_len,              // host-side bound on the per-sequence q lengths
                             int64_t num_q_heads,
                             const PagedKvCache<T>& cache,
                             const PagedSequences& seqs,
                             float scale,
                             T* out,                         // [total_tokens, num_q_heads, head_dim]
                             CudaStream stream);

}  // namespace tandem::kernels
