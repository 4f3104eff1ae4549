// The sampler's passes over a whole row of logits, vectorised: the largest logit, and
// exp(logit / temperature - max) for every id with their sum.
//
// A 151,936-id row at temperature 1 spent most of its ~1 ms in glibc's scalar float64
// `exp` (5.6 ns per id here). These passes compute the same float64 quantities 8 lanes at
// a time. Each function is compiled for AVX-512, AVX2 and the build's baseline and picked
// at load time (GCC target_clones); the file is built without floating-point contraction
// and every lane does the same IEEE additions and multiplications in the same order, so
// the results are the same bits whichever copy runs.
#pragma once

#include <cstdint>

namespace tandem::sampler_rows {

struct RowMaximum {
  float value = 0;         // the largest logit (meaningless when first_nan >= 0)
  int64_t index = -1;      // its lowest id
  int64_t first_nan = -1;  // the lowest id holding a NaN, or -1
};

RowMaximum maximum(const float* logits, int64_t n);

// out[i] = exp(logits[i] * scale - shift), each x = logits[i] * scale - shift <= 0 (shift is
// the largest logit times scale), to within kExpRelativeError; x < -708
// gives 0 (exp(-708) is 3.3e-308: no draw can land on it). Returns the sum of out[], added
// in a fixed order: 8 running sums over ids i mod 8, then those 8 pairwise, then the tail.
double shifted_exps(const float* logits, int64_t n, double scale, double shift, double* out);

// For truncation (top-k, top-p) over weights in [0, 1]: the largest power of two `cut` such
// that the ids with weight >= cut are at least `min_ids` and hold at least `min_mass` (one
// pass counting ids and summing weights per float64 exponent; the mass is summed in another
// order than the caller's, so a caller whose own sums fall short must widen). -1 when no
// power of two does: every id is needed.
double truncation_cut(const double* weights, int64_t n, int64_t min_ids, double min_mass);

// The same exponential on plain float64 arguments x <= 0 (for its tests).
void exp_nonpositive(const double* x, int64_t n, double* out);

// Relative error bound of exp_nonpositive, derived in sampler_rows.cpp.
inline constexpr double kExpRelativeError = 54 * 0x1p-53;

}  // namespace tandem::sampler_rows
