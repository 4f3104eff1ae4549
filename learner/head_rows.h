// The LM head's per-row softmax passes on the CPU (learner/head_logprobs.cpp): one pass over
// a tile row each way (plus the forward's maximum) instead of libtorch's elementwise kernels
// (forward: max, sub, exp, sum, mul, sum; backward: sub, exp, add, mul, add, mul, neg,
// scatter, mul and the bf16 cast), each a trip through memory over a 640 x 4096 tile.
// On the Qwen3-shaped model (151,936 ids, bf16), `perf record` of bench/learner_cpu: before,
// libtorch's own code 17.8% and Sleef's expf 5.2% of the step's cycles; after, libtorch's
// 11.7% and these passes 6.8% (the products, oneDNN's JIT code, ~55-58% both times). Compiled for AVX-512, AVX2 and the baseline, picked at load time (GCC
// target_clones), without floating-point contraction: every copy gives the same bits.
#pragma once

#include <cstdint>

namespace tandem::head_rows {

// exp(x) in float32 for x <= 88, to within kExpRelativeError; x < -87 gives 0 (the result
// would be a subnormal float), -inf gives 0.
void exp_f32(const float* x, int64_t n, float* out);
// Derived in head_rows.cpp (u = 2^-24).
inline constexpr double kExpRelativeError = 30 * 0x1p-24;
// The same, built only for the build's baseline instruction set (for the test that every
// copy of exp_f32 gives the same bits).
void exp_f32_baseline(const float* x, int64_t n, float* out);

// A row's running softmax statistics over its vocabulary tiles: the largest scaled logit
// `top`, sum = Σ exp(z - top) and moment = Σ exp(z - top) (z - top).
struct RowStatistics {
  float top;
  float sum;
  float moment;
};

// Folds one tile row (raw logits, z = logits * inverse_temperature in float32) into `row`:
// rescales the earlier sum and moment to the new maximum, then adds this tile's terms
// (summed in float64, rounded once to float32).
void fold_tile_row(const float* logits, int64_t m, float inverse_temperature, RowStatistics& row);

// One tile row's gradient with respect to the raw logits, in float32:
// grad_j = -p_j (g_entropy (log p_j + entropy) + g_logprob) * inverse_temperature, with
// log p_j = logits_j * inverse_temperature - log_normaliser, plus g_logprob *
// inverse_temperature at `target` (a column of this tile, or -1). A gradient that did not
// reach the row's log-prob or entropy is passed as 0. Written to `grad` (float32) or, when
// `grad_bf16` is given instead, rounded to bfloat16 (nearest even, as core/half.h) for
// bf16 products: no separate cast pass.
void tile_row_gradient(const float* logits, int64_t m, float inverse_temperature, float log_normaliser,
                       float entropy, float g_entropy, float g_logprob, int64_t target, float* grad,
                       uint16_t* grad_bf16 = nullptr);

}  // namespace tandem::head_rows
