// Sampling: one block of 512 threads per row. Passes over the row (each thread strides
// through it, so reads are coalesced except in the last pass):
//   1. max, argmax (lowest id on ties), sum of exp (online), NaN check;
//   2. top-k: radix descent by count on the logits' order keys (<= 4 passes, + <= 4 on
//      ids when the k-th logit is tied);
//   3. top-p: one pass for the kept mass, then a radix descent by mass (same bounds);
//   4. inverse CDF over the kept tokens in id order: each thread sums one contiguous chunk,
//      a block scan finds the chunk holding the target, its thread walks it.
// Each boundary is (order key, id): token i is kept iff (key_i, -i) >= (key_b, -id_b)
// lexicographically, for the top-k and the top-p boundary both.
#include "kernels/sampling.h"

#include "kernels/device_math.cuh"
#include "kernels/launch_check.h"
#include "kernels/philox.h"

#include <cmath>

namespace tandem::kernels {

namespace {

using u64 = unsigned long long;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr float kFixedOne = 1099511627776.0f;  // 2^40: probability 1 in fixed point
constexpr double kFixedToReal = 1.0 / 1099511627776.0;

struct SamplingShared {
  uint32_t count[256];  // radix histogram: elements per digit
  u64 mass[256];        // radix histogram: fixed-point mass per digit
  float scratch[32];
  u64 scratch64[kWarps];
  // The digit walk's result, broadcast to the block.
  uint32_t digit;
  uint32_t count_above;
  u64 mass_above;
  uint32_t bin_count;
  u64 bin_mass;
  int token;
};

// Order-preserving map of a float to uint32 (larger float, larger key); -0 counts as +0.
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t bits = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
__device__ __forceinline__ float key_to_float(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// One row's logits and kept-set boundaries ([0]: top-k, [1]: top-p).
struct Row {
  const float* logits;
  int vocab;
  float inv_t;
  float max_z;
  uint32_t boundary_key[2];
  uint32_t boundary_id[2];

  __device__ u64 fixed_mass(float logit) const {
    return __float2ull_rn(expf(logit * inv_t - max_z) * kFixedOne);
  }
  __device__ bool kept(int i, uint32_t key) const {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      if (key < boundary_key[b] || (key == boundary_key[b] && static_cast<uint32_t>(i) > boundary_id[b])) return false;
    }
    return true;
  }
};

// The elements a radix descent ranks: kept tokens by logit order key.
struct ByLogit {
  const Row& row;
  template <bool kWithMass>
  __device__ bool get(int i, uint32_t& key, u64& mass) const {
    const float x = row.logits[i];
    key = order_key(x);
    if (!row.kept(i, key)) return false;
    if (kWithMass) mass = row.fixed_mass(x);
    return true;
  }
};

// Kept tokens whose logit has order key `tied`, ranked by lower id first (key ~id).
struct ByIdAmongTied {
  const Row& row;
  uint32_t tied;
  template <bool kWithMass>
  __device__ bool get(int i, uint32_t& key, u64& mass) const {
    const uint32_t k = order_key(row.logits[i]);
    if (k != tied || !row.kept(i, k)) return false;
    key = ~static_cast<uint32_t>(i);
    mass = 0;
    return true;
  }
};

__device__ __forceinline__ u64 warp_sum_u64(u64 v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ u64 warp_max_u64(u64 v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const u64 other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}
__device__ u64 block_sum_u64(u64 v, SamplingShared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum_u64(v);
  __syncthreads();
  if (lane == 0) sh.scratch64[warp] = v;
  __syncthreads();
  return warp_sum_u64(lane < kWarps ? sh.scratch64[lane] : 0);
}
__device__ u64 block_max_u64(u64 v, SamplingShared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max_u64(v);
  __syncthreads();
  if (lane == 0) sh.scratch64[warp] = v;
  __syncthreads();
  return warp_max_u64(lane < kWarps ? sh.scratch64[lane] : 0);
}
// Inclusive prefix sum over the block in thread order, and the block total.
__device__ void block_scan_u64(u64 v, SamplingShared& sh, u64& inclusive, u64& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 1; offset < 32; offset *= 2) {
    const u64 other = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += other;
  }
  __syncthreads();
  if (lane == 31) sh.scratch64[warp] = v;
  __syncthreads();
  u64 before = 0, all = 0;
  for (int w = 0; w < kWarps; ++w) {
    const u64 t = sh.scratch64[w];
    before += w < warp ? t : 0;
    all += t;
  }
  inclusive = v + before;
  total = all;
}

// Warp 0: walks the histogram from the top digit down to the first bin at which the
// running count (or mass) reaches `remaining`; if none does (fixed-point mass short of the
// target only through the top-p rounding), the lowest non-empty bin, which keeps all.
// Lane l owns digits 255 - 8l ... 248 - 8l, so lane order is descending digit order.
template <bool kByMass>
__device__ void walk_digits(SamplingShared& sh, u64 remaining) {
  const int lane = threadIdx.x % 32;
  uint32_t counts[8];
  u64 masses[8];
  uint32_t lane_count = 0;
  u64 lane_mass = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int digit = 255 - 8 * lane - i;
    counts[i] = sh.count[digit];
    masses[i] = kByMass ? sh.mass[digit] : 0;
    lane_count += counts[i];
    lane_mass += masses[i];
  }
  uint32_t count_inclusive = lane_count;
  u64 mass_inclusive = lane_mass;
  for (int offset = 1; offset < 32; offset *= 2) {
    const uint32_t c = __shfl_up_sync(0xffffffffu, count_inclusive, offset);
    const u64 m = __shfl_up_sync(0xffffffffu, mass_inclusive, offset);
    if (lane >= offset) {
      count_inclusive += c;
      mass_inclusive += m;
    }
  }
  const bool reached = kByMass ? mass_inclusive >= remaining : count_inclusive >= remaining;
  const unsigned reached_lanes = __ballot_sync(0xffffffffu, reached);
  const unsigned nonempty_lanes = __ballot_sync(0xffffffffu, lane_count > 0);
  const bool fallback = reached_lanes == 0;
  const int chosen = fallback ? 31 - __clz(nonempty_lanes) : __ffs(reached_lanes) - 1;
  if (lane != chosen) return;
  uint32_t run_count = count_inclusive - lane_count;
  u64 run_mass = mass_inclusive - lane_mass;
  int pick = -1;
  uint32_t above_count = 0, pick_count = 0;
  u64 above_mass = 0, pick_mass = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const bool hit = kByMass ? run_mass + masses[i] >= remaining : run_count + counts[i] >= remaining;
    // Not yet picked (the first hit), or falling back (the last non-empty bin).
    if (counts[i] > 0 && (fallback || (pick < 0 && hit))) {
      pick = i;
      above_count = run_count;
      above_mass = run_mass;
      pick_count = counts[i];
      pick_mass = masses[i];
    }
    run_count += counts[i];
    run_mass += masses[i];
  }
  sh.digit = static_cast<uint32_t>(255 - 8 * lane - pick);
  sh.count_above = above_count;
  sh.mass_above = above_mass;
  sh.bin_count = pick_count;
  sh.bin_mass = pick_mass;
}

struct Descent {
  uint32_t prefix;    // the chosen bin's lowest key
  int shift;          // the bin holds keys prefix .. prefix + 2^shift - 1; shift 0: one exact key
  u64 above_count;    // elements (and their mass) with keys above the bin
  u64 above_mass;
  uint32_t bin_count;
  u64 bin_mass;
};

// Radix selection over the first `n` elements: the bin at which the count (or mass) of
// elements with larger keys, counted from the largest, reaches `target`. Stops early when
// the whole bin is needed (count), or holds one element (mass).
template <bool kByMass, typename Elements>
__device__ Descent radix_descend(const Elements& elements, int n, u64 target, SamplingShared& sh) {
  uint32_t prefix = 0;
  u64 above_count = 0, above_mass = 0;
  for (int shift = 24;; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) {
      sh.count[b] = 0;
      sh.mass[b] = 0;
    }
    __syncthreads();  // also: everyone has read the previous walk's result
    const uint32_t high_mask = shift == 24 ? 0u : ~0u << (shift + 8);
    for (int i = threadIdx.x; i < n; i += kThreads) {
      uint32_t key;
      u64 mass = 0;
      if (!elements.template get<kByMass>(i, key, mass) || (key & high_mask) != prefix) continue;
      const uint32_t digit = (key >> shift) & 255u;
      atomicAdd(&sh.count[digit], 1u);
      if (kByMass) atomicAdd(&sh.mass[digit], mass);
    }
    __syncthreads();
    if (threadIdx.x < 32) walk_digits<kByMass>(sh, target - (kByMass ? above_mass : above_count));
    __syncthreads();
    prefix |= sh.digit << shift;
    above_count += sh.count_above;
    above_mass += sh.mass_above;
    const uint32_t bin_count = sh.bin_count;
    const u64 bin_mass = sh.bin_mass;
    const bool done = shift == 0 || (kByMass ? bin_count == 1 : above_count + bin_count == target);
    if (done) return Descent{prefix, shift, above_count, above_mass, bin_count, bin_mass};
  }
}

// Keeps the first `needed` elements of the descent's bin in (key, lower id) order: the
// whole bin when that is all of it, else the lowest ids among the tied exact key.
// kBoundary is a template argument so that Row's arrays stay in registers.
template <int kBoundary>
__device__ void set_boundary(Row& row, const Descent& d, u64 needed, SamplingShared& sh) {
  if (needed >= d.bin_count) {
    row.boundary_key[kBoundary] = d.prefix;
    row.boundary_id[kBoundary] = 0xffffffffu;
    return;
  }
  // needed < bin_count happens only at an exact key (shift 0): ties.
  const Descent ids = radix_descend<false>(ByIdAmongTied{row, d.prefix}, row.vocab, needed, sh);
  row.boundary_key[kBoundary] = d.prefix;
  row.boundary_id[kBoundary] = ~ids.prefix;  // kept: ~id >= ids.prefix, i.e. id <= ~ids.prefix
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SamplingBatch batch, SamplingOutput out) {
  __shared__ SamplingShared sh;
  const int r = blockIdx.x, tid = threadIdx.x;
  const float temperature = batch.temperature[r];
  const float top_p = batch.top_p[r];
  const int top_k = batch.top_k[r];
  const int vocab = static_cast<int>(batch.vocab);
  Row row{batch.logits + r * batch.logits_stride, vocab, 0.0f, 0.0f, {0u, 0u}, {0xffffffffu, 0xffffffffu}};
  const bool bad_params = !(temperature >= 0.0f) || isinf(temperature) || !(top_p > 0.0f && top_p <= 1.0f) || top_k < 0;
  const bool greedy = temperature == 0.0f;
  row.inv_t = greedy ? 1.0f : 1.0f / temperature;

  // 1. max, argmax, sum of exp: each thread keeps an online (max, sum) of its elements.
  bool has_nan = false;
  u64 best = 0;  // (order key, ~id): the max is the largest logit, lowest id on ties
  float thread_max = -INFINITY, thread_sum = 0.0f;
  for (int i = tid; i < vocab; i += kThreads) {
    const float x = row.logits[i];
    has_nan |= isnan(x) || x == INFINITY;  // +inf would make every other mass NaN
    const u64 key = (static_cast<u64>(order_key(x)) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
    best = key > best ? key : best;
    const float z = x * row.inv_t;
    if (z == -INFINITY) continue;  // no mass
    if (z > thread_max) {
      thread_sum = thread_sum * expf(thread_max - z) + 1.0f;
      thread_max = z;
    } else {
      thread_sum += expf(z - thread_max);
    }
  }
  has_nan = __syncthreads_or(has_nan);
  best = block_max_u64(best, sh);
  row.max_z = device::block_max(thread_max, sh.scratch);
  const float sum = device::block_sum(thread_max == -INFINITY ? 0.0f : thread_sum * expf(thread_max - row.max_z),
                                      sh.scratch);
  const float log_z = row.max_z + logf(sum);
  // A sampled row needs a finite max of logits / T: all -inf, or logits / T overflowing fp32
  // (a tiny temperature), would make every fixed-point mass NaN (converted to 2^63) and the
  // draw garbage. Greedy rows only take the argmax and keep the CPU sampler's answer.
  const bool bad_scale = !greedy && !isfinite(row.max_z);
  if (bad_params || has_nan || bad_scale) {  // block-uniform
    if (tid == 0) {
      out.tokens[r] = -1;
      out.logprobs[r] = NAN;
      out.sampling_logprobs[r] = NAN;
    }
    return;
  }
  if (greedy) {
    if (tid == 0) {
      const int token = static_cast<int>(0xffffffffu - static_cast<uint32_t>(best));
      out.tokens[r] = token;
      out.logprobs[r] = row.logits[token] - log_z;
      out.sampling_logprobs[r] = 0.0f;
    }
    return;
  }

  // 2. top-k.
  const bool use_top_k = top_k > 0 && top_k < vocab;
  if (use_top_k) {
    const Descent d = radix_descend<false>(ByLogit{row}, vocab, static_cast<u64>(top_k), sh);
    set_boundary<0>(row, d, static_cast<u64>(top_k) - d.above_count, sh);
  }
  // 3. top-p: the smallest prefix whose mass reaches top_p of the kept mass.
  const bool use_top_p = top_p < 1.0f;
  if (use_top_p) {
    u64 kept = 0;
    for (int i = tid; i < vocab; i += kThreads) {
      const float x = row.logits[i];
      if (row.kept(i, order_key(x))) kept += row.fixed_mass(x);
    }
    kept = block_sum_u64(kept, sh);
    // cumulative >= top_p * kept, for integer cumulative: >= ceil(top_p * kept).
    const double threshold = ceil(static_cast<double>(top_p) * static_cast<double>(kept));
    const u64 target = threshold < 1.0 ? 1 : (threshold > static_cast<double>(kept) ? kept : static_cast<u64>(threshold));
    const Descent d = radix_descend<true>(ByLogit{row}, vocab, target, sh);
    u64 needed = d.bin_count;  // shift > 0: the bin is one element
    if (d.shift == 0) {
      // Tied elements have equal mass w: the first ceil((target - above) / w) of them.
      const u64 w = row.fixed_mass(key_to_float(d.prefix));
      if (w > 0 && target > d.above_mass) needed = (target - d.above_mass + w - 1) / w;
    }
    set_boundary<1>(row, d, needed, sh);
  }

  // 4. Inverse CDF in id order over the kept tokens, target = u * kept mass.
  if (tid == 0) sh.token = -1;  // ordered before the finder's write by the scan's barriers
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, tid * chunk), end = min(vocab, begin + chunk);
  u64 local = 0;
  for (int i = begin; i < end; ++i) {
    const float x = row.logits[i];
    if (row.kept(i, order_key(x))) local += row.fixed_mass(x);
  }
  u64 inclusive = 0, total = 0;
  block_scan_u64(local, sh, inclusive, total);  // total >= 2^40: the argmax is always kept
  const double u = philox_uniform(batch.seeds[r], static_cast<uint64_t>(batch.positions[r]));
  u64 target = static_cast<u64>(u * static_cast<double>(total));
  target = target < total ? target : total - 1;
  // Thread chunks tile [0, total) exactly (integers), so exactly one thread holds target.
  if (inclusive - local <= target && target < inclusive) {
    u64 cumulative = inclusive - local;
    for (int i = begin; i < end; ++i) {
      const float x = row.logits[i];
      if (!row.kept(i, order_key(x))) continue;
      cumulative += row.fixed_mass(x);
      if (cumulative > target) {
        sh.token = i;
        break;
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    const int token = sh.token;
    if (token < 0) {  // unreachable: the chunks tile [0, total)
      out.tokens[r] = -1;
      out.logprobs[r] = NAN;
      out.sampling_logprobs[r] = NAN;
      return;
    }
    const float z = row.logits[token] * row.inv_t;
    out.tokens[r] = token;
    out.logprobs[r] = z - log_z;
    out.sampling_logprobs[r] = (use_top_k || use_top_p)
                                   ? z - row.max_z - static_cast<float>(log(static_cast<double>(total) * kFixedToReal))
                                   : z - log_z;
  }
}

}  // namespace

void sample_tokens(const SamplingBatch& batch, const SamplingOutput& out, CudaStream stream) {
  const char* what = "sample_tokens";
  TANDEM_CHECK(batch.rows >= 0 && batch.rows <= kMaxGridX, "{}: rows must be in [0, {}], got {}", what, kMaxGridX,
               batch.rows);
  // Masses are summed in 64-bit fixed point with 2^40 for probability 1: 2^23 tokens fit.
  TANDEM_CHECK(batch.vocab > 0 && batch.vocab <= (int64_t{1} << 23), "{}: vocab must be in [1, 2^23], got {}", what,
               batch.vocab);
  TANDEM_CHECK(batch.logits_stride == 0 || batch.logits_stride >= batch.vocab,
               "{}: logits_stride must be 0 (shared row) or >= vocab ({}), got {}", what, batch.vocab,
               batch.logits_stride);
  if (batch.rows == 0) return;
  TANDEM_CHECK(batch.logits && batch.temperature && batch.top_k && batch.top_p && batch.seeds && batch.positions,
               "{}: null input pointer", what);
  TANDEM_CHECK(out.tokens && out.logprobs && out.sampling_logprobs, "{}: null output pointer", what);
  sample_kernel<<<static_cast<unsigned>(batch.rows), kThreads, 0, stream>>>(batch, out);
  check_launch(what);
}

}  // namespace tandem::kernels
