#include "rollout/sampler.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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
  const bool greedy = params.temperature == 0;
  const double inv_t = greedy ? 1.0 : 1.0 / params.temperature;
  scaled_.resize(static_cast<size_t>(vocab));
  double max_z = -INFINITY;
  int32_t argmax = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    TANDEM_CHECK(!std::isnan(logits[i]), "logit {} is NaN", i);
    scaled_[i] = static_cast<double>(logits[i]) * inv_t;
    if (scaled_[i] > max_z) {
      max_z = scaled_[i];
      argmax = static_cast<int32_t>(i);
    }
  }
  // exp(z - max_z) once per token, kept for the inverse-CDF pass below (the exponentials
  // are most of a 151k-id row's sampling time).
  weights_.resize(static_cast<size_t>(vocab));
  double sum = 0;  // of exp(z - max_z) over the whole vocabulary
  for (int64_t i = 0; i < vocab; ++i) {
    weights_[i] = std::exp(scaled_[i] - max_z);
    sum += weights_[i];
  }
  const double log_z = max_z + std::log(sum);
  auto full_logprob = [&](int32_t t) { return static_cast<float>(scaled_[t] - log_z); };

  if (greedy) return {argmax, full_logprob(argmax), 0.0f};

  const bool truncate = (params.top_k > 0 && params.top_k < vocab) || params.top_p < 1;
  if (!truncate) {
    const double target = uniform * sum;
    double cumulative = 0;
    int32_t last_possible = argmax;
    for (int64_t i = 0; i < vocab; ++i) {
      const double w = weights_[i];
      if (w == 0) continue;
      last_possible = static_cast<int32_t>(i);
      cumulative += w;
      if (cumulative > target) return {last_possible, full_logprob(last_possible), full_logprob(last_possible)};
    }
    // Rounding left `target` just above the sum: the last token with any mass.
    return {last_possible, full_logprob(last_possible), full_logprob(last_possible)};
  }

  candidates_.resize(static_cast<size_t>(vocab));
  std::iota(candidates_.begin(), candidates_.end(), 0);
  auto by_probability = [&](int32_t a, int32_t b) { return scaled_[a] > scaled_[b] || (scaled_[a] == scaled_[b] && a < b); };
  size_t kept = candidates_.size();
  if (params.top_k > 0 && params.top_k < vocab) {
    kept = static_cast<size_t>(params.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + kept, candidates_.end(), by_probability);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_probability);
  }
  double kept_mass = 0;
  for (size_t i = 0; i < kept; ++i) kept_mass += weights_[candidates_[i]];
  if (params.top_p < 1) {
    // The smallest prefix whose mass reaches top_p of the (top-k renormalised) mass.
    const double threshold = params.top_p * kept_mass;
    double cumulative = 0;
    size_t prefix = 0;
    while (prefix < kept) {
      cumulative += weights_[candidates_[prefix]];
      ++prefix;
      if (cumulative >= threshold) break;
    }
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
  return {token, full_logprob(token), static_cast<float>(scaled_[token] - log_kept)};
}

}  // namespace tandem
