#include "learner/head_rows.h"

#include "core/row_lanes.h"

#include <cmath>
#include <cstring>
#include <limits>

// Built with -ffp-contract=off (learner/meson.build), as core/row_lanes.h requires.

namespace tandem::head_rows {

namespace {

using namespace row_lanes;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp(x), lane by lane, x <= 88 (larger x is taken as 88).
//
// x = k ln2 + r with k = round(x / ln2), |r| <= ln2/2 (+ rounding): ln2 in two parts (ln2_hi
// has 15 significant bits, so k * ln2_hi is exact for |k| <= 127, and x - k * ln2_hi is
// exact by Sterbenz's lemma); exp(r) by its Taylor series to r^7/7! (the first omitted term,
// 0.347^8/8!, is 0.09 u); times 2^k built in the exponent bits. Error, with u = 2^-24:
// <= 0.35u from the reduced argument, Horner's rule on 8 terms without fused multiply-adds
// gamma_14 * e^|r| / e^r <= 14u * e^0.7 = 28.2u relative, the product by 2^k exact (x >= -87
// keeps the result normal): under 30u in all, kExpRelativeError (measured: ~1.5u).
inline __attribute__((always_inline)) Floats16 exp_lanes(Floats16 x) {
  constexpr float kLowest = -87.0f, kHighest = 88.0f;
  const Int32s16 underflow = x < kLowest;
  Floats16 xc = underflow ? Floats16{} + kLowest : x;  // -inf too
  xc = xc > kHighest ? Floats16{} + kHighest : xc;
  constexpr float kShifter = 0x1.8p23f;  // adding it rounds to an integer in the low bits
  const Floats16 shifted = xc * 1.44269504f + kShifter;
  const Floats16 k = shifted - kShifter;
  Floats16 r = xc - k * 0.693145751953125f;  // ln2_hi
  r = r - k * 1.428606765330187e-06f;        // ln2_lo
  Floats16 p = r * (1.0f / 5040.0f) + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // The shifted value's low bits hold k + 2^22; 2^k's bits are (k + 127) << 23. (A cast
  // between GCC vector types of one size keeps the bits.)
  const Int32s16 k_bits = ((Int32s16)shifted - 0x4B400000 + 127) << 23;
  const Floats16 result = p * (Floats16)k_bits;
  return underflow ? Floats16{} : result;
}

inline __attribute__((always_inline)) Floats16 load(const float* p) {
  Floats16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The first n < 16 floats of p, the other lanes `fill`.
inline __attribute__((always_inline)) Floats16 load_first(const float* p, int64_t n, float fill) {
  Floats16 v = Floats16{} + fill;
  for (int64_t j = 0; j < n; ++j) v[j] = p[j];
  return v;
}

inline __attribute__((always_inline)) Doubles8 low_half(Floats16 v) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), Doubles8);
}
inline __attribute__((always_inline)) Doubles8 high_half(Floats16 v) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), Doubles8);
}

// Rounded to bfloat16, nearest even, NaN kept quiet: core/half.h's float_to_bf16 (and
// libtorch's cast) lane by lane.
inline __attribute__((always_inline)) Uint16s16 to_bf16_lanes(Floats16 v) {
  const Uint32s16 bits = (Uint32s16)v;
  const Uint32s16 rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const Uint32s16 nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return __builtin_convertvector(nan ? (bits >> 16) | 0x40u : rounded, Uint16s16);
}

}  // namespace

namespace {

inline __attribute__((always_inline)) void exp_f32_body(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const Floats16 e = exp_lanes(load(x + i));
    std::memcpy(out + i, &e, sizeof(e));
  }
  if (i < n) {
    const Floats16 e = exp_lanes(load_first(x + i, n - i, 0.0f));
    for (int64_t j = i; j < n; ++j) out[j] = e[j - i];
  }
}

}  // namespace

TANDEM_ROW_CLONES void exp_f32(const float* x, int64_t n, float* out) { exp_f32_body(x, n, out); }

void exp_f32_baseline(const float* x, int64_t n, float* out) { exp_f32_body(x, n, out); }

TANDEM_ROW_CLONES void fold_tile_row(const float* logits, int64_t m, float inverse_temperature, RowStatistics& row) {
  // The tile's largest z (scaling by 1/T > 0 keeps the order; z is formed the same way below).
  Floats16 best = Floats16{} + kNegInf;
  int64_t j = 0;
  for (; j + 16 <= m; j += 16) {
    const Floats16 z = load(logits + j) * inverse_temperature;
    best = z > best ? z : best;
  }
  float tile_top = kNegInf;
  for (int lane = 0; lane < 16; ++lane) tile_top = best[lane] > tile_top ? best[lane] : tile_top;
  for (; j < m; ++j) {
    const float z = logits[j] * inverse_temperature;
    tile_top = z > tile_top ? z : tile_top;
  }
  const float top = row.top > tile_top ? row.top : tile_top;
  if (top == kNegInf) return;  // every term so far is exp(-inf) = 0
  // What earlier tiles summed relative to the old maximum: z - new = (z - old) + (old - new).
  if (row.top == kNegInf) {
    row.sum = row.moment = 0;
  } else if (row.top != top) {
    const float shift = row.top - top;
    const float scale = std::exp(shift);
    row.moment = (row.moment + row.sum * shift) * scale;
    row.sum *= scale;
  }
  Doubles8 sums = {}, moments = {};
  j = 0;
  for (; j + 16 <= m; j += 16) {
    const Floats16 d = load(logits + j) * inverse_temperature - top;
    const Floats16 e = exp_lanes(d);
    const Doubles8 e_low = low_half(e), e_high = high_half(e);
    sums += e_low + e_high;
    moments += e_low * low_half(d) + e_high * high_half(d);  // float products, exact in float64
  }
  if (j < m) {  // the tail through the same lanes; the padding is -inf: exp 0, and its moment term 0
    const Floats16 d = load_first(logits + j, m - j, kNegInf) * inverse_temperature - top;
    const Floats16 e = exp_lanes(d);
    const Int32s16 real = d > kNegInf;
    const Floats16 d_real = real ? d : Floats16{};
    const Doubles8 e_low = low_half(e), e_high = high_half(e);
    sums += e_low + e_high;
    moments += e_low * low_half(d_real) + e_high * high_half(d_real);
  }
  row.sum = static_cast<float>(static_cast<double>(row.sum) + sum_lanes(sums));
  row.moment = static_cast<float>(static_cast<double>(row.moment) + sum_lanes(moments));
  row.top = top;
}

TANDEM_ROW_CLONES void tile_row_gradient(const float* logits, int64_t m, float inverse_temperature,
                                         float log_normaliser, float entropy, float g_entropy, float g_logprob,
                                         int64_t target, float* grad, uint16_t* grad_bf16) {
  auto gradient = [&](Floats16 l, int64_t first) {
    const Floats16 log_p = l * inverse_temperature - log_normaliser;
    const Floats16 weight = (log_p + entropy) * g_entropy + g_logprob;
    Floats16 g = -(exp_lanes(log_p) * weight) * inverse_temperature;
    if (target >= first && target < first + 16) g[target - first] += g_logprob * inverse_temperature;
    return g;
  };
  auto store = [&](Floats16 g, int64_t first, int64_t count) {
    if (grad_bf16) {
      const Uint16s16 b = to_bf16_lanes(g);
      std::memcpy(grad_bf16 + first, &b, static_cast<size_t>(count) * sizeof(uint16_t));
    } else {
      std::memcpy(grad + first, &g, static_cast<size_t>(count) * sizeof(float));
    }
  };
  int64_t j = 0;
  for (; j + 16 <= m; j += 16) store(gradient(load(logits + j), j), j, 16);
  if (j < m) store(gradient(load_first(logits + j, m - j, 0.0f), j), j, m - j);
}

}  // namespace tandem::head_rows
