// Split-K decode attention over the paged KV cache (flash-decoding).
//
// Grid (sequence, group of kGroup query heads sharing one kv head, context partition of
// kPartition tokens); 128 threads. A block
//   1. scores its partition's keys for its kGroup heads: a key row is split over
//      kLanesPerKey lanes holding 16 bytes each, so a warp scores 32 / kLanesPerKey keys
//      per 128-bit load and reduces each dot product with log2(kLanesPerKey) shuffles;
//      the scores go to shared memory;
//   2. takes the partition's max and sum of exp (block reductions);
//   3. accumulates p * V with the same lane split, reduces across keys in the warp with
//      shuffles and across warps through shared memory (reusing the score buffer);
//   4. writes the normalised output directly when the launch has one partition, else the
//      partition's output, max and sum, which paged_decode_reduce_kernel merges.
// Keys are read once per kGroup heads: kGroup is the largest of 8, 4, 2, 1 dividing the
// GQA group size.
#include "kernels/attention_common.cuh"
#include "kernels/device_math.cuh"

#include <cmath>

namespace tandem::kernels {

namespace {

using device::from_float;
using device::load_pack;
using device::Pack;
using device::to_float;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kPartition = static_cast<int>(kDecodePartitionTokens);
// The reduce kernel keeps one weight per partition in dynamic shared memory. Without a
// cudaFuncSetAttribute opt-in, static + dynamic shared memory must fit in 48 KiB, and the
// kernel's block reductions already hold 32 floats statically: 12256 partitions.
constexpr int64_t kReduceStaticFloats = 32;
constexpr int64_t kMaxPartitions = (48 * 1024) / static_cast<int64_t>(sizeof(float)) - kReduceStaticFloats;

template <typename T, int kHeadDim>
struct DecodeLayout {
  static constexpr int kRowBytes = kHeadDim * static_cast<int>(sizeof(T));
  static constexpr int kLanesPerKey = kRowBytes / 16 >= 32 ? 32 : (kRowBytes / 16 >= 1 ? kRowBytes / 16 : 1);
  static constexpr int kElems = kHeadDim / kLanesPerKey;  // per lane: 16 bytes, 32 for fp32 head_dim 256
  static constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  static constexpr int kKeysPerIter = kKeysPerWarp * kWarps;
  static_assert(kLanesPerKey * kElems == kHeadDim, "head_dim must split evenly over the lanes of a key");
  static_assert((kLanesPerKey & (kLanesPerKey - 1)) == 0, "shuffle reductions need a power-of-two lane count");
};

template <typename T, int kHeadDim, int kGroup>
__global__ void __launch_bounds__(kThreads)
    paged_decode_kernel(const T* q, int64_t q_stride, const T* key_cache, const T* value_cache, int num_blocks,
                        int block_size, int num_kv_heads, const int32_t* block_tables, const int32_t* seq_lens,
                        int64_t max_blocks_per_seq, int max_seq_len, int num_q_heads, float scale, float* partial_out,
                        float* partial_max, float* partial_sum, T* out) {
  using L = DecodeLayout<T, kHeadDim>;
  constexpr int kScoreFloats = kGroup * kPartition;
  constexpr int kWarpOutFloats = kWarps * kGroup * kHeadDim;
  // Scores [kGroup][kPartition] first; once consumed, the per-warp outputs [kWarps][kGroup][kHeadDim].
  __shared__ float smem[kScoreFloats > kWarpOutFloats ? kScoreFloats : kWarpOutFloats];
  __shared__ float s_reduce[kWarps][kGroup];
  __shared__ float s_max[kGroup];
  __shared__ float s_sum[kGroup];

  const int seq = blockIdx.x;
  const int first_head = blockIdx.y * kGroup;
  const int part = blockIdx.z;
  const int num_parts = gridDim.z;
  const int kv_head = first_head / (num_q_heads / num_kv_heads);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int seq_len = seq_lens[seq];
  // The kGroup output rows of this block are consecutive: [seq, first_head + g].
  const int64_t out_row = static_cast<int64_t>(seq) * num_q_heads + first_head;

  // Every early return depends on blockIdx only, so whole blocks leave together.
  if (seq_len < 0 || seq_len > max_seq_len) {  // a broken plan: NaN (the reduce kernel does the same)
    if (num_parts == 1) {
      for (int i = tid; i < kGroup * kHeadDim; i += kThreads) out[out_row * kHeadDim + i] = from_float<T>(NAN);
    }
    return;
  }
  const int begin = part * kPartition;
  if (begin >= seq_len) {  // past this sequence's context; with one partition, an empty context
    if (num_parts == 1) {
      for (int i = tid; i < kGroup * kHeadDim; i += kThreads) out[out_row * kHeadDim + i] = from_float<T>(0.0f);
    }
    return;
  }
  const int n = min(seq_len - begin, kPartition);
  const int32_t* table = block_tables + seq * max_blocks_per_seq;
  const int key_in_warp = lane / L::kLanesPerKey;
  const int dim0 = (lane % L::kLanesPerKey) * L::kElems;  // this lane's first element of a key or value row

  float q_reg[kGroup][L::kElems];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const T* qh = q + seq * q_stride + static_cast<int64_t>(first_head + g) * kHeadDim + dim0;
#pragma unroll
    for (int e = 0; e < L::kElems; ++e) q_reg[g][e] = to_float(qh[e]) * scale;
  }

  // 1. Scores. The loop bound is block-uniform so every lane reaches the shuffles.
  float* scores = smem;
  for (int base = 0; base < n; base += L::kKeysPerIter) {
    const int j = base + warp * L::kKeysPerWarp + key_in_warp;
    float dot[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) dot[g] = 0.0f;
    bool bad_block = false;
    if (j < n) {
      const int64_t offset =
          device::paged_offset(table, begin + j, block_size, num_blocks, num_kv_heads, kv_head, kHeadDim);
      bad_block = offset < 0;
      if (!bad_block) {
        const Pack<T, L::kElems> k = load_pack<T, L::kElems>(key_cache + offset + dim0);
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
#pragma unroll
          for (int e = 0; e < L::kElems; ++e) dot[g] += q_reg[g][e] * to_float(k.v[e]);
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
#pragma unroll
      for (int offset = L::kLanesPerKey / 2; offset > 0; offset /= 2) {
        dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], offset);
      }
    }
    if (j < n && dim0 == 0) {
#pragma unroll
      for (int g = 0; g < kGroup; ++g) scores[g * kPartition + j] = bad_block ? NAN : dot[g];
    }
  }
  __syncthreads();

  // 2. Max, then exp and sum, per head. A NaN score is dropped by the max but makes the sum NaN.
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    float m = -INFINITY;
    for (int j = tid; j < n; j += kThreads) m = fmaxf(m, scores[g * kPartition + j]);
    m = device::warp_max(m);
    if (lane == 0) s_reduce[warp][g] = m;
  }
  __syncthreads();
  if (tid < kGroup) {
    float m = s_reduce[0][tid];
    for (int w = 1; w < kWarps; ++w) m = fmaxf(m, s_reduce[w][tid]);
    s_max[tid] = m;
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    const float m = s_max[g];
    float sum = 0.0f;
    for (int j = tid; j < n; j += kThreads) {
      const float p = expf(scores[g * kPartition + j] - m);
      scores[g * kPartition + j] = p;
      sum += p;
    }
    sum = device::warp_sum(sum);
    if (lane == 0) s_reduce[warp][g] = sum;
  }
  __syncthreads();  // also publishes the exponentiated scores
  if (tid < kGroup) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += s_reduce[w][tid];
    s_sum[tid] = sum;
  }

  // 3. p * V, the same lane split as the scores.
  float acc[kGroup][L::kElems];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
#pragma unroll
    for (int e = 0; e < L::kElems; ++e) acc[g][e] = 0.0f;
  }
  for (int base = 0; base < n; base += L::kKeysPerIter) {
    const int j = base + warp * L::kKeysPerWarp + key_in_warp;
    if (j < n) {
      const int64_t offset =
          device::paged_offset(table, begin + j, block_size, num_blocks, num_kv_heads, kv_head, kHeadDim);
      if (offset >= 0) {  // a bad block already made this key's score, and so the sum, NaN
        const Pack<T, L::kElems> v = load_pack<T, L::kElems>(value_cache + offset + dim0);
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          const float p = scores[g * kPartition + j];
#pragma unroll
          for (int e = 0; e < L::kElems; ++e) acc[g][e] += p * to_float(v.v[e]);
        }
      }
    }
  }
  // Lanes lane ^ offset for offset >= kLanesPerKey hold the same elements of other keys.
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
#pragma unroll
    for (int e = 0; e < L::kElems; ++e) {
#pragma unroll
      for (int offset = L::kLanesPerKey; offset < 32; offset *= 2) {
        acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], offset);
      }
    }
  }
  __syncthreads();  // every warp is done reading the scores: smem becomes the per-warp outputs
  float* warp_out = smem;
  if (key_in_warp == 0) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
#pragma unroll
      for (int e = 0; e < L::kElems; ++e) warp_out[(warp * kGroup + g) * kHeadDim + dim0 + e] = acc[g][e];
    }
  }
  __syncthreads();

  // 4. Across warps, normalised by this partition's sum.
  for (int i = tid; i < kGroup * kHeadDim; i += kThreads) {
    const int g = i / kHeadDim;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += warp_out[w * kGroup * kHeadDim + i];
    o /= s_sum[g];
    if (num_parts == 1) {
      out[out_row * kHeadDim + i] = from_float<T>(o);
    } else {
      partial_out[((out_row + g) * num_parts + part) * kHeadDim + i % kHeadDim] = o;
    }
  }
  if (num_parts > 1 && tid < kGroup) {
    partial_max[(out_row + tid) * num_parts + part] = s_max[tid];
    partial_sum[(out_row + tid) * num_parts + part] = s_sum[tid];
  }
}

// Merges the partitions of one (sequence, query head): weights sum_p * exp(max_p - max),
// normalised. Grid (sequence, query head); dynamic shared memory: one float per partition.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    paged_decode_reduce_kernel(const float* partial_out, const float* partial_max, const float* partial_sum,
                               const int32_t* seq_lens, int max_seq_len, int num_q_heads, int head_dim, int num_parts,
                               T* out) {
  extern __shared__ float s_weight[];  // [num_parts]
  __shared__ float scratch[kReduceStaticFloats];
  const int seq = blockIdx.x, tid = threadIdx.x;
  const int64_t row = static_cast<int64_t>(seq) * num_q_heads + blockIdx.y;
  T* o = out + row * head_dim;
  const int seq_len = seq_lens[seq];
  if (seq_len < 0 || seq_len > max_seq_len) {
    for (int d = tid; d < head_dim; d += blockDim.x) o[d] = from_float<T>(NAN);
    return;
  }
  const int parts = (seq_len + kPartition - 1) / kPartition;
  if (parts == 0) {
    for (int d = tid; d < head_dim; d += blockDim.x) o[d] = from_float<T>(0.0f);
    return;
  }
  const float* maxima = partial_max + row * num_parts;
  const float* sums = partial_sum + row * num_parts;
  float m = -INFINITY;
  for (int p = tid; p < parts; p += blockDim.x) m = fmaxf(m, maxima[p]);
  const float global_max = device::block_max(m, scratch);
  float total = 0.0f;
  for (int p = tid; p < parts; p += blockDim.x) {
    const float w = sums[p] * expf(maxima[p] - global_max);
    s_weight[p] = w;
    total += w;
  }
  total = device::block_sum(total, scratch);  // its barriers also publish s_weight
  const float inverse = 1.0f / total;
  const float* outs = partial_out + row * num_parts * head_dim;
  for (int d = tid; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int p = 0; p < parts; ++p) acc += s_weight[p] * outs[static_cast<int64_t>(p) * head_dim + d];
    o[d] = from_float<T>(acc * inverse);
  }
}

int64_t decode_partitions(int64_t max_seq_len) {
  return std::max<int64_t>(1, (max_seq_len + kPartition - 1) / kPartition);
}

struct DecodeLaunch {
  dim3 grid;
  int64_t q_stride;
  int num_q_heads;
  float scale;
  float* partial_out;
  float* partial_max;
  float* partial_sum;
};

template <typename T, int kHeadDim, int kGroup>
void launch_decode(const T* q, const PagedKvCache<T>& cache, const PagedSequences& seqs, const DecodeLaunch& l, T* out,
                   CudaStream stream) {
  dim3 grid(l.grid.x, l.grid.y / kGroup, l.grid.z);
  paged_decode_kernel<T, kHeadDim, kGroup><<<grid, kThreads, 0, stream>>>(
      q, l.q_stride, cache.key, cache.value, static_cast<int>(cache.num_blocks), static_cast<int>(cache.block_size),
      static_cast<int>(cache.num_kv_heads), seqs.block_tables, seqs.seq_lens, seqs.max_blocks_per_seq,
      static_cast<int>(seqs.max_seq_len), l.num_q_heads, l.scale, l.partial_out, l.partial_max, l.partial_sum, out);
}

template <typename T, int kHeadDim>
void launch_decode_for_group(int group, const T* q, const PagedKvCache<T>& cache, const PagedSequences& seqs,
                             const DecodeLaunch& l, T* out, CudaStream stream) {
  // Heads per block: the largest of 8, 4, 2, 1 dividing the GQA group size.
  if (group % 8 == 0) {
    launch_decode<T, kHeadDim, 8>(q, cache, seqs, l, out, stream);
  } else if (group % 4 == 0) {
    launch_decode<T, kHeadDim, 4>(q, cache, seqs, l, out, stream);
  } else if (group % 2 == 0) {
    launch_decode<T, kHeadDim, 2>(q, cache, seqs, l, out, stream);
  } else {
    launch_decode<T, kHeadDim, 1>(q, cache, seqs, l, out, stream);
  }
}

}  // namespace

int64_t paged_decode_workspace_bytes(int64_t num_seqs, int64_t num_q_heads, int64_t head_dim, int64_t max_seq_len) {
  const int64_t parts = decode_partitions(max_seq_len);
  if (parts == 1) return 0;
  return num_seqs * num_q_heads * parts * (head_dim + 2) * static_cast<int64_t>(sizeof(float));
}

template <typename T>
void paged_decode_attention(const T* q, int64_t q_stride, int64_t num_q_heads, const PagedKvCache<T>& cache,
                            const PagedSequences& seqs, float scale, void* workspace, int64_t workspace_bytes, T* out,
                            CudaStream stream) {
  const char* what = "paged_decode_attention";
  check_paged_cache(what, cache);
  check_paged_sequences(what, seqs, cache, num_q_heads);
  const int64_t head_dim = cache.head_dim;
  TANDEM_CHECK(seqs.num_seqs <= kMaxGridX && num_q_heads <= kMaxGridYZ, "{}: {} sequences of {} heads is too many",
               what, seqs.num_seqs, num_q_heads);
  TANDEM_CHECK(q_stride >= num_q_heads * head_dim, "{}: q_stride {} is less than num_q_heads * head_dim = {}", what,
               q_stride, num_q_heads * head_dim);
  TANDEM_CHECK(std::isfinite(scale) && scale > 0, "{}: scale must be finite and > 0, got {}", what, scale);
  const int64_t parts = decode_partitions(seqs.max_seq_len);
  TANDEM_CHECK(parts <= kMaxPartitions, "{}: max_seq_len {} exceeds the supported {} tokens", what, seqs.max_seq_len,
               kMaxPartitions * kPartition);
  const int64_t needed = paged_decode_workspace_bytes(seqs.num_seqs, num_q_heads, head_dim, seqs.max_seq_len);
  TANDEM_CHECK(workspace_bytes >= needed, "{}: workspace of {} bytes, {} needed (paged_decode_workspace_bytes)", what,
               workspace_bytes, needed);
  TANDEM_CHECK(needed == 0 || (workspace != nullptr && is_aligned(workspace, 16)),
               "{}: workspace must be a 16-byte aligned device pointer", what);
  if (seqs.num_seqs == 0) return;
  TANDEM_CHECK(q != nullptr && out != nullptr, "{}: null q or out", what);

  const int64_t rows = seqs.num_seqs * num_q_heads;
  float* partial_out = static_cast<float*>(workspace);
  DecodeLaunch l{dim3(static_cast<unsigned>(seqs.num_seqs), static_cast<unsigned>(num_q_heads),
                      static_cast<unsigned>(parts)),
                 q_stride,
                 static_cast<int>(num_q_heads),
                 scale,
                 partial_out,
                 parts > 1 ? partial_out + rows * parts * head_dim : nullptr,
                 parts > 1 ? partial_out + rows * parts * (head_dim + 1) : nullptr};
  const int group = static_cast<int>(num_q_heads / cache.num_kv_heads);
  switch (head_dim) {
    case 8: launch_decode_for_group<T, 8>(group, q, cache, seqs, l, out, stream); break;
    case 16: launch_decode_for_group<T, 16>(group, q, cache, seqs, l, out, stream); break;
    case 32: launch_decode_for_group<T, 32>(group, q, cache, seqs, l, out, stream); break;
    case 64: launch_decode_for_group<T, 64>(group, q, cache, seqs, l, out, stream); break;
    case 128: launch_decode_for_group<T, 128>(group, q, cache, seqs, l, out, stream); break;
    case 256: launch_decode_for_group<T, 256>(group, q, cache, seqs, l, out, stream); break;
    default: TANDEM_CHECK(false, "{}: head_dim {} has no kernel", what, head_dim);
  }
  check_launch(what);
  if (parts > 1) {
    paged_decode_reduce_kernel<T><<<dim3(static_cast<unsigned>(seqs.num_seqs), static_cast<unsigned>(num_q_heads)),
                                    kThreads, static_cast<size_t>(parts) * sizeof(float), stream>>>(
        l.partial_out, l.partial_max, l.partial_sum, seqs.seq_lens, static_cast<int>(seqs.max_seq_len),
        static_cast<int>(num_q_heads), static_cast<int>(head_dim), static_cast<int>(parts), out);
    check_launch("paged_decode_attention (reduce)");
  }
}

template void paged_decode_attention<float>(const float*, int64_t, int64_t, const PagedKvCache<float>&,
                                            const PagedSequences&, float, void*, int64_t, float*, CudaStream);
template void paged_decode_attention<__nv_bfloat16>(const __nv_bfloat16*, int64_t, int64_t,
                                                    const PagedKvCache<__nv_bfloat16>&, const PagedSequences&, float,
                                                    void*, int64_t, __nv_bfloat16*, CudaStream);

}  // namespace tandem::kernels
