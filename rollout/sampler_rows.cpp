#include "rollout/sampler_rows.h"

#include "core/row_lanes.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

// Built with -ffp-contract=off (rollout/meson.build), as core/row_lanes.h requires.

namespace tandem::sampler_rows {

namespace {

using namespace row_lanes;

// exp(x) for x <= 0, lane by lane.
//
// x = k ln2 + r with k = round(x / ln2) and |r| <= ln2/2 (+ rounding): ln2 split in two
// (fdlibm's ln2_hi has 32 significant bits, so k * ln2_hi is exact for |k| <= 1022 and
// x - k * ln2_hi is exact by Sterbenz's lemma); exp(r) by its Taylor series to r^13/13!
// (the first omitted term, 0.347^14/14!, is 4e-18 relative); times 2^k built in the
// exponent bits. Error, with u = 2^-53: the reduced argument carries <= 0.35u absolute
// error, Horner's rule on 14 terms without fused multiply-adds <= gamma_26 * e^|r| / e^r
// <= 26u * e^0.7 = 52.4u relative, the final product by 2^k is exact (the result stays
// normal: x >= -708): under 54u in all, kExpRelativeError. (Measured: 1.5u at most.)
inline __attribute__((always_inline)) Doubles8 exp_nonpositive_lanes(Doubles8 x) {
  constexpr double kLowest = -708.0;  // exp(-708) = 3.3e-308, still a normal float64
  const Int64s8 underflow = x < kLowest;
  const Doubles8 xc = underflow ? Doubles8{} + kLowest : x;  // also turns -inf into kLowest
  constexpr double kShifter = 0x1.8p52;  // adding it rounds to an integer in the low bits
  const Doubles8 shifted = xc * 1.4426950408889634 + kShifter;
  const Doubles8 k = shifted - kShifter;
  Doubles8 r = xc - k * 6.93147180369123816490e-01;  // ln2_hi
  r = r - k * 1.90821492927058770002e-10;           // ln2_lo
  Doubles8 p = r * (1.0 / 6227020800.0) + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // The shifted value's low bits hold k + 2^51; 2^k's bits are (k + 1023) << 52.
  // (A cast between GCC vector types of one size keeps the bits.)
  const Int64s8 k_bits = ((Int64s8)shifted - 0x4338000000000000LL + 1023) << 52;
  const Doubles8 result = p * (Doubles8)k_bits;
  return underflow ? Doubles8{} : result;
}

}  // namespace

TANDEM_ROW_CLONES RowMaximum maximum(const float* logits, int64_t n) {
  RowMaximum result;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Per lane: the largest value and the first 16-wide block holding it (strict >), so the
  // lowest id of the maximum is the smallest block * 16 + lane among the lanes that hold it.
  Floats16 best = Floats16{} + kNegInf;
  Int32s16 best_block = {}, nan_seen = {};
  int32_t block = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16, ++block) {
    Floats16 x;
    std::memcpy(&x, logits + i, sizeof(x));
    nan_seen |= x != x;
    const Int32s16 greater = x > best;
    best = greater ? x : best;
    best_block = greater ? Int32s16{} + block : best_block;
  }
  bool nan = false;
  float value = kNegInf;
  int64_t index = -1;
  for (int lane = 0; lane < 16; ++lane) {
    nan = nan || nan_seen[lane] != 0;
    const int64_t id = static_cast<int64_t>(best_block[lane]) * 16 + lane;
    if (i > 0 && (index < 0 || best[lane] > value || (best[lane] == value && id < index))) value = best[lane], index = id;
  }
  for (; i < n; ++i) {  // the tail: ids above every block's, so only a strictly larger value wins
    nan = nan || std::isnan(logits[i]);
    if (index < 0 || logits[i] > value) value = logits[i], index = i;
  }
  if (nan) {
    for (int64_t j = 0; j < n; ++j)
      if (std::isnan(logits[j])) {
        result.first_nan = j;
        break;
      }
    return result;
  }
  result.value = value;
  result.index = index;
  return result;
}

TANDEM_ROW_CLONES double shifted_exps(const float* logits, int64_t n, double scale, double shift, double* out) {
  Doubles8 sums = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Floats8 l;
    std::memcpy(&l, logits + i, sizeof(l));
    const Doubles8 e = exp_nonpositive_lanes(__builtin_convertvector(l, Doubles8) * scale - shift);
    std::memcpy(out + i, &e, sizeof(e));
    sums += e;
  }
  double total = sum_lanes(sums);
  if (i < n) {  // the tail through the same lanes, so every id's value is computed alike
    Doubles8 x = {};
    for (int64_t j = i; j < n; ++j) x[j - i] = static_cast<double>(logits[j]) * scale - shift;
    const Doubles8 e = exp_nonpositive_lanes(x);
    for (int64_t j = i; j < n; ++j) {
      out[j] = e[j - i];
      total += e[j - i];
    }
  }
  return total;
}

double truncation_cut(const double* weights, int64_t n, int64_t min_ids, double min_mass) {
  // Ids and their mass per biased exponent (weights are normal numbers or 0, so the exponent
  // is the binade); four tables in turn, so ids in one binade do not wait on each other's sums.
  constexpr int kBinades = 1024;  // biased exponents 0 (zero) .. 1023 (1.0)
  static thread_local std::vector<int32_t> counts;
  static thread_local std::vector<double> masses;
  counts.assign(4 * kBinades, 0);
  masses.assign(4 * kBinades, 0.0);
  auto slot = [&](int64_t i, int table) {
    uint64_t bits;
    std::memcpy(&bits, weights + i, sizeof(bits));
    return table * kBinades + static_cast<int>((bits >> 52) & (kBinades - 1));
  };
  const bool need_mass = min_mass > 0;  // top-k alone needs only the counts
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int table = 0; table < 4; ++table) {
      const int s = slot(i + table, table);
      ++counts[s];
      if (need_mass) masses[s] += weights[i + table];
    }
  for (; i < n; ++i) {
    const int s = slot(i, 0);
    ++counts[s];
    masses[s] += weights[i];
  }
  int64_t ids = 0;
  double mass = 0;
  for (int binade = kBinades - 1; binade > 0; --binade) {
    for (int table = 0; table < 4; ++table) {
      ids += counts[table * kBinades + binade];
      mass += masses[table * kBinades + binade];
    }
    if (ids > 0 && ids >= min_ids && mass >= min_mass) return std::ldexp(1.0, binade - 1023);
  }
  return -1;
}

void exp_nonpositive(const double* x, int64_t n, double* out) {
  for (int64_t i = 0; i < n; i += 8) {
    Doubles8 lanes = {};
    const int64_t count = n - i < 8 ? n - i : 8;
    for (int64_t j = 0; j < count; ++j) lanes[j] = x[i + j];
    const Doubles8 e = exp_nonpositive_lanes(lanes);
    for (int64_t j = 0; j < count; ++j) out[i + j] = e[j];
  }
}

}  // namespace tandem::sampler_rows
