#include "rollout/sampler.h"

#include "core/error.h"
#include "rollout/sampler_rows.h"

#include <algorithm>
#include <cmath>

namespace tandem {

void check_sampling_params(const SamplingParams& p) {
  TANDEM_CHECK(std::isfinite(p.temperature) && p.temperature >= 0, "temperature must be >= 0, got {}", p.temperature);
  TANDEM_CHECK(p.top_k >= 0, "top_k must be >= 0 (0: off), got {}", p.top_k);
  TANDEM_CHECK(p.top_p > 0 && p.top_p <= 1, "top_p must be in (0, 1], got {}", p.top_p);
}

double uniform_from_counter(uint64_t seed, uint64_t counter) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + counter + 0x632BE59BD9B4E019ull;
  for (int round = 0; round < 2; ++round) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
  }
  return static_cast<double>(z >> 11) * 0x1.0p-53;  // 53 random bits
}

SampledToken Sampler::sample(const float* logits, int64_t vocab, const SamplingParams& params, double uniform) {
  TANDEM_CHECK(vocab > 0, "empty logits row");
  const sampler_rows::RowMaximum top = sampler_rows::maximum(logits, vocab);
  TANDEM_CHECK(top.first_nan < 0, "logit {} is NaN", top.first_nan);
  TANDEM_CHECK(std::isfinite(top.value), "the largest logit is {} (id {}): a row needs a finite maximum", top.value,
               top.index);
  const bool greedy = params.temperature == 0;
  const double inv_t = greedy ? 1.0 : 1.0 / params.temperature;
  // Scaling by 1/T > 0 keeps the order, so the largest logit gives the largest scaled value.
  const double max_z = static_cast<double>(top.value) * inv_t;
  const int32_t argmax = static_cast<int32_t>(top.index);
  auto scaled = [&](int32_t t) { return static_cast<double>(logits[t]) * inv_t; };
  // exp(z - max_z) once per token, kept for the inverse-CDF and truncation passes below.
  weights_.resize(static_cast<size_t>(vocab));
  const double sum = sampler_rows::shifted_exps(logits, vocab, inv_t, max_z, weights_.data());
  const double log_z = max_z + std::log(sum);
  auto full_logprob = [&](int32_t t) { return static_cast<float>(scaled(t) - log_z); };

  if (greedy) return {argmax, full_logprob(argmax), 0.0f};

  const bool top_k_on = params.top_k > 0 && params.top_k < vocab;
  if (!top_k_on && params.top_p >= 1) {
    // The first id whose running sum of weights exceeds uniform * sum. Whole 8-id blocks
    // are skipped while the running sum plus the block's stays at or below the target (one
    // dependent addition per 8 ids instead of per id); the crossing block, and anything
    // after it if rounding put the crossing elsewhere, is walked id by id.
    const double target = uniform * sum;
    const double* w = weights_.data();
    double cumulative = 0;
    int64_t i = 0;
    for (; i + 8 <= vocab; i += 8) {
      const double block = ((w[i] + w[i + 1]) + (w[i + 2] + w[i + 3])) + ((w[i + 4] + w[i + 5]) + (w[i + 6] + w[i + 7]));
      if (cumulative + block > target) break;
      cumulative += block;
    }
    for (; i < vocab; ++i) {
      if (w[i] == 0) continue;  // no mass: never drawn
      cumulative += w[i];
      if (cumulative > target) return {static_cast<int32_t>(i), full_logprob(static_cast<int32_t>(i)),
                                        full_logprob(static_cast<int32_t>(i))};
    }
    // Rounding left `target` at or above the running sum: the last token with any mass.
    int32_t last_possible = argmax;
    for (int64_t j = vocab - 1; j >= 0; --j)
      if (w[j] != 0) {
        last_possible = static_cast<int32_t>(j);
        break;
      }
    return {last_possible, full_logprob(last_possible), full_logprob(last_possible)};
  }

  // Truncation looks at the tokens in order of decreasing probability (ties: lower id
  // first). Sorting a 151k-id row costs milliseconds, so only the tokens whose weight
  // reaches a cut are sorted: they are a prefix of that order (exp keeps the order), and
  // when they hold the top-k (with top-k) or top_p of the mass (without) the rest cannot
  // matter. If rounding leaves the sorted sums short of that, every token is sorted.
  auto by_probability = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const size_t top_k = top_k_on ? static_cast<size_t>(params.top_k) : static_cast<size_t>(vocab);
  const double first_cut = sampler_rows::truncation_cut(weights_.data(), vocab, top_k_on ? params.top_k : 0,
                                                         top_k_on ? 0.0 : params.top_p * sum);
  for (const double cut : {first_cut, -1.0}) {
    candidates_.clear();
    for (int64_t i = 0; i < vocab; ++i)
      if (weights_[i] >= cut) candidates_.push_back(static_cast<int32_t>(i));
    const bool everything = cut < 0;
    if (!everything && candidates_.size() < top_k && top_k_on) continue;  // the cut splits the top-k
    size_t kept = std::min(top_k, candidates_.size());
    if (kept == candidates_.size()) {
      std::sort(candidates_.begin(), candidates_.end(), by_probability);
    } else {
      std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(kept),
                        candidates_.end(), by_probability);
    }
    double kept_mass = sum;  // without top-k: the whole row's
    if (top_k_on) {
      kept_mass = 0;
      for (size_t i = 0; i < kept; ++i) kept_mass += weights_[candidates_[i]];
    }
    if (params.top_p < 1) {
      // The smallest prefix whose mass reaches top_p of the (top-k renormalised) mass.
      const double threshold = params.top_p * kept_mass;
      double cumulative = 0;
      size_t prefix = 0;
      while (prefix < kept && cumulative < threshold) cumulative += weights_[candidates_[prefix++]];
      if (cumulative < threshold && !everything && kept < top_k) continue;  // the nucleus reaches past the cut
      kept = prefix;
      kept_mass = cumulative;
    }
    const double target = uniform * kept_mass;
    double cumulative = 0;
    size_t chosen = kept - 1;
    for (size_t i = 0; i < kept; ++i) {
      cumulative += weights_[candidates_[i]];
      if (cumulative > target) {
        chosen = i;
        break;
      }
    }
    const int32_t token = candidates_[chosen];
    const double log_kept = max_z + std::log(kept_mass);
    return {token, full_logprob(token), static_cast<float>(scaled(token) - log_kept)};
  }
  throw_check_failure(__FILE__, __LINE__, "cut < 0", "the last cut keeps every token");  // not reached
}

}  // namespace tandem
