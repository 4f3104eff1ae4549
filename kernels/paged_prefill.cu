// Causal prefill attention over the paged KV cache, flash-attention style on CUDA cores.
//
// Grid (tile of 16 rows, kv head, sequence); 128 threads = 4 warps x 4 rows. A row is one
// (new token, query head of this kv head's group) pair, so the query heads of a group
// share every key tile the block loads. Per tile of 32 keys (read from the cache, 128-bit
// loads, into shared memory as fp32):
//   scores: lane j of a warp owns key j and dots it with the warp's 4 query rows;
//   online softmax: warp max / sum per row, rescaling the running output;
//   p * V: lane owns output elements lane, lane + 32, ...; p_j comes by shuffle.
// The keys needed by a block end at its last row's position, so causal masking costs
// only the last tile. Tensor-core MMA would be faster for long prompts; this version is
// kept simple enough to be checked by reading.
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
constexpr int kRowsPerWarp = 4;
constexpr int kRows = kWarps * kRowsPerWarp;  // rows per block
constexpr int kKeys = 32;                     // keys per tile: one per lane

template <int kHeadDim>
struct PrefillSmem {
  static constexpr int kKStride = kHeadDim + 1;  // lane j reads sK[j][d]: bank (j + d) % 32, no conflict
  static constexpr int kFloats = kRows * kHeadDim + kKeys * kKStride + kKeys * kHeadDim;
  static constexpr size_t kBytes = kFloats * sizeof(float);
};

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    paged_prefill_kernel(const T* q, int64_t q_stride, const int32_t* cu_seqlens_q, int64_t total_tokens,
                         int max_q_len, const T* key_cache, const T* value_cache, int num_blocks, int block_size,
                         int num_kv_heads, const int32_t* block_tables, const int32_t* seq_lens,
                         int64_t max_blocks_per_seq, int max_seq_len, int num_q_heads, float scale, T* out) {
  constexpr int kE = kHeadDim >= 32 ? kHeadDim / 32 : 1;  // output elements per lane
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));   // elements per 16-byte pack of a cached row
  constexpr int kPacksPerRow = kHeadDim / kVec;
  constexpr int kKStride = PrefillSmem<kHeadDim>::kKStride;
  static_assert(kHeadDim % kVec == 0 && kHeadDim % 4 == 0, "head_dim must be whole packs and float4s");
  extern __shared__ float4 smem_raw[];  // float4: 16-byte alignment for the float4 reads of sQ
  float* sQ = reinterpret_cast<float*>(smem_raw);  // [kRows][kHeadDim], pre-scaled
  float* sK = sQ + kRows * kHeadDim;               // [kKeys][kKStride]
  float* sV = sK + kKeys * kKStride;               // [kKeys][kHeadDim]

  const int seq = blockIdx.z, kv_head = blockIdx.y;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int group = num_q_heads / num_kv_heads;
  // In 64 bits: a broken cu_seqlens_q must not overflow past the checks below.
  const int64_t q_begin64 = cu_seqlens_q[seq];
  const int64_t q_len64 = static_cast<int64_t>(cu_seqlens_q[seq + 1]) - q_begin64;
  // A broken cu_seqlens_q leaves nowhere safe to write; the engine builds it from the same
  // plan as max_q_len and total_tokens.
  if (q_begin64 < 0 || q_len64 < 0 || q_len64 > max_q_len || q_begin64 + q_len64 > total_tokens) return;
  const int q_begin = static_cast<int>(q_begin64), q_len = static_cast<int>(q_len64);  // both <= total_tokens < 2^31
  const int rows = q_len * group;
  const int row0 = blockIdx.x * kRows;
  if (row0 >= rows) return;  // blockIdx-uniform: the whole block leaves
  const int seq_len = seq_lens[seq];
  // Position of the sequence's first new token; seq_len < q_len (tested before subtracting,
  // so that a negative seq_len cannot wrap around) is a broken plan.
  const int ctx_begin = seq_len < q_len ? -1 : seq_len - q_len;

  // Row r: new token r / group, query head kv_head * group + r % group.
  auto out_row = [&](int r) {
    return out + (static_cast<int64_t>(q_begin + r / group) * num_q_heads + kv_head * group + r % group) * kHeadDim;
  };
  if (ctx_begin < 0 || seq_len > max_seq_len) {  // a broken plan: NaN rows
    for (int i = tid; i < kRows * kHeadDim; i += kThreads) {
      const int r = row0 + i / kHeadDim;
      if (r < rows) out_row(r)[i % kHeadDim] = from_float<T>(NAN);
    }
    return;
  }

  for (int i = tid; i < kRows * kHeadDim; i += kThreads) {
    const int r = row0 + i / kHeadDim, d = i % kHeadDim;
    float value = 0.0f;
    if (r < rows) {
      const int64_t token = q_begin + r / group;
      value = to_float(q[token * q_stride + static_cast<int64_t>(kv_head * group + r % group) * kHeadDim + d]) * scale;
    }
    sQ[i] = value;
  }
  int row_pos[kRowsPerWarp];  // position of each of this warp's rows; -1 past the last row (sees no key)
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = row0 + warp * kRowsPerWarp + i;
    row_pos[i] = r < rows ? ctx_begin + r / group : -1;
  }
  const int last_row = min(row0 + kRows, rows) - 1;
  const int max_pos = ctx_begin + last_row / group;  // this block needs keys 0 ..= max_pos
  const int32_t* table = block_tables + seq * max_blocks_per_seq;

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kE];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < kE; ++e) acc[i][e] = 0.0f;
  }

  for (int tile = 0; tile <= max_pos; tile += kKeys) {  // block-uniform bound
    __syncthreads();  // the previous tile is consumed (first pass: sQ is complete)
    for (int i = tid; i < kKeys * kPacksPerRow; i += kThreads) {
      const int j = i / kPacksPerRow, d0 = (i % kPacksPerRow) * kVec;
      const int position = tile + j;
      float kf[kVec], vf[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) kf[e] = vf[e] = 0.0f;  // past max_pos: masked, and 0 * 0 adds nothing
      if (position <= max_pos) {
        const int64_t offset =
            device::paged_offset(table, position, block_size, num_blocks, num_kv_heads, kv_head, kHeadDim);
        if (offset < 0) {  // a block id outside the cache: NaN, never a wild read
#pragma unroll
          for (int e = 0; e < kVec; ++e) kf[e] = vf[e] = NAN;
        } else {
          const Pack<T, kVec> kp = load_pack<T, kVec>(key_cache + offset + d0);
          const Pack<T, kVec> vp = load_pack<T, kVec>(value_cache + offset + d0);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            kf[e] = to_float(kp.v[e]);
            vf[e] = to_float(vp.v[e]);
          }
        }
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        sK[j * kKStride + d0 + e] = kf[e];
        sV[j * kHeadDim + d0 + e] = vf[e];
      }
    }
    __syncthreads();

    // Scores of key `lane` against the warp's rows.
    float s[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) s[i] = 0.0f;
    const float* k_row = sK + lane * kKStride;
    const float* q_rows = sQ + warp * kRowsPerWarp * kHeadDim;
#pragma unroll 4
    for (int d = 0; d < kHeadDim; d += 4) {
      const float k0 = k_row[d], k1 = k_row[d + 1], k2 = k_row[d + 2], k3 = k_row[d + 3];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const float4 qv = *reinterpret_cast<const float4*>(q_rows + i * kHeadDim + d);
        s[i] += qv.x * k0 + qv.y * k1 + qv.z * k2 + qv.w * k3;
      }
    }

    // Online softmax. m[i], l[i] are warp-uniform, so the branch below is too.
    float p[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const bool visible = tile + lane <= row_pos[i];
      const float si = visible ? s[i] : -INFINITY;
      const float m_new = fmaxf(m[i], device::warp_max(si));
      if (m_new == -INFINITY) {  // nothing visible yet: only rows past the last
        p[i] = 0.0f;
        continue;
      }
      const float correction = expf(m[i] - m_new);  // 0 on the first visible tile (m = -inf)
      p[i] = visible ? expf(si - m_new) : 0.0f;
      l[i] = l[i] * correction + device::warp_sum(p[i]);
      m[i] = m_new;
#pragma unroll
      for (int e = 0; e < kE; ++e) acc[i][e] *= correction;
    }

    // p * V: lane owns elements lane + 32 e; p_j of key j is lane j's, by shuffle.
#pragma unroll 4
    for (int j = 0; j < kKeys; ++j) {
      float v[kE];
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const int d = lane + 32 * e;
        v[e] = d < kHeadDim ? sV[j * kHeadDim + d] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const float pj = __shfl_sync(0xffffffffu, p[i], j);
#pragma unroll
        for (int e = 0; e < kE; ++e) acc[i][e] += pj * v[e];
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = row0 + warp * kRowsPerWarp + i;
    if (r >= rows) continue;
    T* o = out_row(r);
    const float inverse = 1.0f / l[i];
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const int d = lane + 32 * e;
      if (d < kHeadDim) o[d] = from_float<T>(acc[i][e] * inverse);
    }
  }
}

struct PrefillLaunch {
  dim3 grid;
  int64_t q_stride;
  const int32_t* cu_seqlens_q;
  int64_t total_tokens;
  int max_q_len;
  int num_q_heads;
  float scale;
};

template <typename T, int kHeadDim>
void launch_prefill(const T* q, const PagedKvCache<T>& cache, const PagedSequences& seqs, const PrefillLaunch& l,
                    T* out, CudaStream stream) {
  constexpr size_t bytes = PrefillSmem<kHeadDim>::kBytes;
  if (bytes > 48 * 1024) {  // above the default dynamic limit (head_dim 256: 82 KiB), opt in
    cuda_check(cudaFuncSetAttribute(paged_prefill_kernel<T, kHeadDim>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)),
               "paged_prefill_attention", "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  }
  paged_prefill_kernel<T, kHeadDim><<<l.grid, kThreads, bytes, stream>>>(
      q, l.q_stride, l.cu_seqlens_q, l.total_tokens, l.max_q_len, cache.key, cache.value,
      static_cast<int>(cache.num_blocks), static_cast<int>(cache.block_size), static_cast<int>(cache.num_kv_heads),
      seqs.block_tables, seqs.seq_lens, seqs.max_blocks_per_seq, static_cast<int>(seqs.max_seq_len), l.num_q_heads,
      l.scale, out);
}

}  // namespace

template <typename T>
void paged_prefill_attention(const T* q, int64_t q_stride, const int32_t* cu_seqlens_q, int64_t total_tokens,
                             int64_t max_q_len, int64_t num_q_heads, const PagedKvCache<T>& cache,
                             const PagedSequences& seqs, float scale, T* out, CudaStream stream) {
  const char* what = "paged_prefill_attention";
  check_paged_cache(what, cache);
  check_paged_sequences(what, seqs, cache, num_q_heads);
  const int64_t head_dim = cache.head_dim;
  const int64_t group = num_q_heads / cache.num_kv_heads;
  TANDEM_CHECK(seqs.num_seqs <= kMaxGridYZ, "{}: at most {} sequences per launch, got {}", what, kMaxGridYZ,
               seqs.num_seqs);
  TANDEM_CHECK(cache.num_kv_heads <= kMaxGridYZ, "{}: at most {} kv heads, got {}", what, kMaxGridYZ,
               cache.num_kv_heads);
  TANDEM_CHECK(num_q_heads <= (int64_t{1} << 31) - 1, "{}: num_q_heads {} is too many", what, num_q_heads);
  TANDEM_CHECK(max_q_len >= 0 && max_q_len <= seqs.max_seq_len, "{}: max_q_len {} must be in [0, max_seq_len = {}]",
               what, max_q_len, seqs.max_seq_len);
  TANDEM_CHECK(max_q_len * group <= (int64_t{1} << 30), "{}: max_q_len {} x {} heads per kv head is too many rows",
               what, max_q_len, group);
  TANDEM_CHECK(total_tokens >= 0 && total_tokens <= (int64_t{1} << 31) - 1, "{}: total_tokens {} out of range", what,
               total_tokens);
  TANDEM_CHECK(q_stride >= num_q_heads * head_dim, "{}: q_stride {} is less than num_q_heads * head_dim = {}", what,
               q_stride, num_q_heads * head_dim);
  TANDEM_CHECK(std::isfinite(scale) && scale > 0, "{}: scale must be finite and > 0, got {}", what, scale);
  if (seqs.num_seqs == 0 || max_q_len == 0 || total_tokens == 0) return;
  TANDEM_CHECK(q != nullptr && out != nullptr && cu_seqlens_q != nullptr, "{}: null q, out or cu_seqlens_q", what);

  const int64_t tiles = (max_q_len * group + kRows - 1) / kRows;
  PrefillLaunch l{dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(cache.num_kv_heads),
                       static_cast<unsigned>(seqs.num_seqs)),
                  q_stride,
                  cu_seqlens_q,
                  total_tokens,
                  static_cast<int>(max_q_len),
                  static_cast<int>(num_q_heads),
                  scale};
  switch (head_dim) {
    case 8: launch_prefill<T, 8>(q, cache, seqs, l, out, stream); break;
    case 16: launch_prefill<T, 16>(q, cache, seqs, l, out, stream); break;
    case 32: launch_prefill<T, 32>(q, cache, seqs, l, out, stream); break;
    case 64: launch_prefill<T, 64>(q, cache, seqs, l, out, stream); break;
    case 128: launch_prefill<T, 128>(q, cache, seqs, l, out, stream); break;
    case 256: launch_prefill<T, 256>(q, cache, seqs, l, out, stream); break;
    default: TANDEM_CHECK(false, "{}: head_dim {} has no kernel", what, head_dim);
  }
  check_launch(what);
}

template void paged_prefill_attention<float>(const float*, int64_t, const int32_t*, int64_t, int64_t, int64_t,
                                             const PagedKvCache<float>&, const PagedSequences&, float, float*,
                                             CudaStream);
template void paged_prefill_attention<__nv_bfloat16>(const __nv_bfloat16*, int64_t, const int32_t*, int64_t, int64_t,
                                                     int64_t, const PagedKvCache<__nv_bfloat16>&,
                                                     const PagedSequences&, float, __nv_bfloat16*, CudaStream);

}  // namespace tandem::kernels
