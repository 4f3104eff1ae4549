// Float64 references of kernels/paged_attention.h, on host memory with the same layouts
// (PagedKvCache<double>, PagedSequences with host pointers): softmax attention written
// directly, one (token, head) at a time, reading keys through the block tables.
#pragma once

#include "kernels/paged_attention.h"

#include <cstdint>

namespace tandem::kernels::reference {

// Negative slots and slots past the cache are skipped, as the kernel.
void kv_cache_append(const double* k,               // [tokens, num_kv_heads, head_dim], rows k_stride apart
                     int64_t k_stride,
                     const double* v,               // [tokens, num_kv_heads, head_dim], rows v_stride apart
                     int64_t v_stride,
                     const int64_t* slot_mapping,   // [tokens]
                     int64_t tokens,
                     const PagedKvCache<double>& cache);

// Attention of each sequence's one query over its seq_lens[s] cached tokens. Zeros for an
// empty context; NaN for a length outside [0, max_seq_len] or a block id outside the cache.
void paged_decode_attention(const double* q,         // [num_seqs, num_q_heads, head_dim], rows q_stride apart
                            int64_t q_stride,
                            int64_t num_q_heads,
                            const PagedKvCache<double>& cache,
                            const PagedSequences& seqs,
                            double scale,
                            double* out);            // [num_seqs, num_q_heads, head_dim]

// Causal attention of each sequence's new tokens (the last q_len of its seq_lens[s]).
void paged_prefill_attention(const double* q,         // [total_tokens, num_q_heads, head_dim], rows q_stride apart
                             int64_t q_stride,
                             const int32_t* cu_seqlens_q,  // [num_seqs + 1]
                             int64_t num_q_heads,
                             const PagedKvCache<double>& cache,
                             const PagedSequences& seqs,
                             double scale,
                             double* out);            // [total_tokens, num_q_heads, head_dim]

}  // namespace tandem::kernels::reference
