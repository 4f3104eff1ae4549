#include "kernels/reference/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tandem::kernels::reference {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The cache row of (position, kv_head) of a sequence, or null for a block id outside the cache.
const double* cached_row(const double* tensor, const PagedKvCache<double>& cache, const int32_t* table,
                         int64_t position, int64_t kv_head) {
  const int64_t block = table[position / cache.block_size];
  if (block < 0 || block >= cache.num_blocks) return nullptr;
  const int64_t slot = block * cache.block_size + position % cache.block_size;
  return tensor + (slot * cache.num_kv_heads + kv_head) * cache.head_dim;
}

// out = softmax(scale * q . K[0..context)) V of one query head.
void attend(const double* q, const PagedKvCache<double>& cache, const int32_t* table, int64_t context,
            int64_t kv_head, double scale, double* out) {
  const int64_t d = cache.head_dim;
  std::fill(out, out + d, 0.0);
  if (context == 0) return;
  std::vector<double> scores(static_cast<size_t>(context));
  double max_score = -INFINITY;
  for (int64_t j = 0; j < context; ++j) {
    const double* k = cached_row(cache.key, cache, table, j, kv_head);
    if (k == nullptr) {
      std::fill(out, out + d, kNaN);
      return;
    }
    double dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += q[i] * k[i];
    scores[j] = dot * scale;
    max_score = std::max(max_score, scores[j]);
  }
  double sum = 0;
  for (double& s : scores) sum += s = std::exp(s - max_score);
  for (int64_t j = 0; j < context; ++j) {
    const double* v = cached_row(cache.value, cache, table, j, kv_head);
    for (int64_t i = 0; i < d; ++i) out[i] += scores[j] / sum * v[i];
  }
}

}  // namespace

void kv_cache_append(const double* k, int64_t k_stride, const double* v, int64_t v_stride,
                     const int64_t* slot_mapping, int64_t tokens, const PagedKvCache<double>& cache) {
  const int64_t row = cache.num_kv_heads * cache.head_dim;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0 || slot >= cache.num_blocks * cache.block_size) continue;
    std::copy(k + t * k_stride, k + t * k_stride + row, cache.key + slot * row);
    std::copy(v + t * v_stride, v + t * v_stride + row, cache.value + slot * row);
  }
}

void paged_decode_attention(const double* q, int64_t q_stride, int64_t num_q_heads, const PagedKvCache<double>& cache,
                            const PagedSequences& seqs, double scale, double* out) {
  const int64_t d = cache.head_dim, group = num_q_heads / cache.num_kv_heads;
  for (int64_t s = 0; s < seqs.num_seqs; ++s) {
    const int64_t len = seqs.seq_lens[s];
    const int32_t* table = seqs.block_tables + s * seqs.max_blocks_per_seq;
    for (int64_t h = 0; h < num_q_heads; ++h) {
      double* o = out + (s * num_q_heads + h) * d;
      if (len < 0 || len > seqs.max_seq_len) {
        std::fill(o, o + d, kNaN);
        continue;
      }
      attend(q + s * q_stride + h * d, cache, table, len, h / group, scale, o);
    }
  }
}

void paged_prefill_attention(const double* q, int64_t q_stride, const int32_t* cu_seqlens_q, int64_t num_q_heads,
                             const PagedKvCache<double>& cache, const PagedSequences& seqs, double scale,
                             double* out) {
  const int64_t d = cache.head_dim, group = num_q_heads / cache.num_kv_heads;
  for (int64_t s = 0; s < seqs.num_seqs; ++s) {
    const int64_t q_begin = cu_seqlens_q[s], q_len = cu_seqlens_q[s + 1] - q_begin;
    const int64_t len = seqs.seq_lens[s];
    const int32_t* table = seqs.block_tables + s * seqs.max_blocks_per_seq;
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t token = q_begin + i;
      const int64_t position = len - q_len + i;
      for (int64_t h = 0; h < num_q_heads; ++h) {
        double* o = out + (token * num_q_heads + h) * d;
        if (len - q_len < 0 || len > seqs.max_seq_len) {
          std::fill(o, o + d, kNaN);
          continue;
        }
        attend(q + token * q_stride + h * d, cache, table, position + 1, h / group, scale, o);
      }
    }
  }
}

}  // namespace tandem::kernels::reference
