// Test-only: how far a float32 forward of a model may land from the exact one, derived
// from the arithmetic and the model's own sizes and weights instead of from what one
// CPU happened to measure.
//
// The error model (first order: a model of the arithmetic, not a proof):
//  - every value on the path from the embedding to the head is a float32 sum of K terms
//    (a matrix product's row, an attention score, a softmax's normalizer and weighted sum,
//    an RMS norm's sum of squares): it lies within K·u·Σ|terms| of the exact sum
//    (u = 2^-24, the unit roundoff), in any order of addition and any blocking;
//  - relative errors add along the path, each block passing on its input's error with
//    unit gain (RMS norms rescale every block's input to unit size; the test models'
//    weights keep each block's Jacobian near one), so the final hidden state h carries a
//    relative error of K_path·u, K_path the summed lengths of every sum on the path;
//  - elementary functions (exp, SiLU, sin/cos of RoPE, the square root of a norm) add a
//    few u each: kElementaryUlps per function on the path;
//  - a logit z_v = W_v·h then errs by at most K_path·u·‖W_v‖·‖h‖, and the head's own sum
//    is inside K_path. After the final RMS norm ‖h‖ ≤ √hidden·max|g|, g that norm's weight.
// A log-prob is z_v/T - log Σ_w exp(z_w/T): each term moves by at most δz/T, the
// log-sum-exp by at most max δz/T plus the rounding of its own vocab-long sum (V·u).
// Two float32 implementations each within the bound are within twice of each other.
// Nothing here was measured on a CPU, so the bounds hold on Intel and AMD alike.
#pragma once

#include "actor/model_config.h"
#include "actor/model_weights.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tandem::testing {

constexpr double kUnitRoundoff = 0x1p-24;  // float32
constexpr double kElementaryUlps = 4;      // libm and vectorized exp/log/sin/cos: within a few ulps

// The summed lengths of the float32 sums from the embedding to one logit, for sequences
// of up to `max_tokens` positions.
inline double forward_path_length(const ModelConfig& c, int64_t max_tokens) {
  const double hidden = static_cast<double>(c.hidden_size);
  const double attention_width = static_cast<double>(c.num_attention_heads * c.head_dim);
  const double positions = static_cast<double>(max_tokens);
  const double per_layer = hidden                                  // input RMS norm
                           + hidden                                 // q/k/v projections
                           + (c.qk_norm ? static_cast<double>(c.head_dim) : 0)
                           + static_cast<double>(c.head_dim)        // scores q·k
                           + 2 * positions                          // softmax normalizer, weighted sum of values
                           + attention_width                        // output projection
                           + hidden                                 // post-attention RMS norm
                           + hidden                                 // gate and up projections
                           + static_cast<double>(c.intermediate_size)  // down projection
                           + kElementaryUlps * 4;                   // RoPE sin/cos, exp, SiLU, rsqrt
  return static_cast<double>(c.num_hidden_layers) * per_layer + hidden /* final norm */ + hidden /* head */;
}

inline double max_abs(const WeightTensor& t) {
  double m = 0;
  for (float v : t.data) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}

// The largest row norm ‖W_v‖ of the output head.
inline double max_head_row_norm(const ModelConfig& c, const ModelWeights& w) {
  const WeightTensor& head = w.get(c.num_labels > 0          ? "score.weight"
                                   : c.tie_word_embeddings ? "model.embed_tokens.weight"
                                                           : "lm_head.weight");
  const int64_t cols = head.shape[1];
  double best = 0;
  for (int64_t r = 0; r < head.shape[0]; ++r) {
    double sq = 0;
    for (int64_t i = 0; i < cols; ++i) sq += static_cast<double>(head.data[r * cols + i]) * head.data[r * cols + i];
    best = std::max(best, std::sqrt(sq));
  }
  return best;
}

// Activations stored in a narrower type than the float32 sums (the CUDA backend's bf16):
// every store rounds to within `roundoff` relative (bf16: 2^-9), `stores_per_layer` times
// per layer along the path, plus the final norm's output and the logits themselves. The
// relative errors add to the path's like any other (the weights are exact in that type).
struct ActivationStorage {
  double roundoff = 0;  // 0: float32 throughout
  double stores_per_layer = 0;
};

// The relative error the final hidden state (and the head's sum) carries.
inline double forward_relative_error(const ModelConfig& c, int64_t max_tokens, ActivationStorage storage = {}) {
  const double stores = static_cast<double>(c.num_hidden_layers) * storage.stores_per_layer + 2;
  return forward_path_length(c, max_tokens) * kUnitRoundoff + stores * storage.roundoff;
}

// How far one forward's logits may lie from the exact ones.
inline double logit_tolerance(const ModelConfig& c, const ModelWeights& w, int64_t max_tokens,
                              ActivationStorage storage = {}) {
  const double h_norm = std::sqrt(static_cast<double>(c.hidden_size)) * max_abs(w.get("model.norm.weight"));
  return forward_relative_error(c, max_tokens, storage) * max_head_row_norm(c, w) * h_norm;
}

// How far one forward's log-probs (at `temperature`; greedy's are at 1) may lie from the
// exact ones. The log-sum-exp is a float32 sum of V terms.
inline double logprob_tolerance(const ModelConfig& c, const ModelWeights& w, int64_t max_tokens,
                                double temperature = 1.0, ActivationStorage storage = {}) {
  const double t = temperature > 0 ? temperature : 1.0;
  return 2 * logit_tolerance(c, w, max_tokens, storage) / t + static_cast<double>(c.vocab_size) * kUnitRoundoff;
}

// How far two float32 implementations' log-probs may lie apart: each within the bound.
inline double logprob_agreement(const ModelConfig& c, const ModelWeights& w, int64_t max_tokens,
                                double temperature = 1.0) {
  return 2 * logprob_tolerance(c, w, max_tokens, temperature);
}

}  // namespace tandem::testing
