// The sampler: empirical frequencies against the exact distribution (chi-square),
// truncation never emitting a disallowed token, log-probs against float64.
#include "rollout/sampler.h"
#include "tests/support/chi_square.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace tandem;

namespace {

// The distribution the sampler should draw from, in float64, written from the definitions.
std::vector<double> expected_distribution(const std::vector<float>& logits, const SamplingParams& p) {
  const size_t v = logits.size();
  std::vector<double> prob(v);
  double max_z = -1e300;
  for (float l : logits) max_z = std::max(max_z, l / p.temperature);
  double total = 0;
  for (size_t i = 0; i < v; ++i) total += prob[i] = std::exp(logits[i] / p.temperature - max_z);
  for (double& x : prob) x /= total;
  std::vector<size_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
  std::vector<bool> allowed(v, true);
  if (p.top_k > 0)
    for (size_t r = static_cast<size_t>(p.top_k); r < v; ++r) allowed[order[r]] = false;
  if (p.top_p < 1) {
    double kept = 0;
    for (size_t i = 0; i < v; ++i) kept += allowed[i] ? prob[i] : 0;
    double cumulative = 0;
    bool reached = false;
    for (size_t r = 0; r < v; ++r) {
      if (!allowed[order[r]]) continue;
      if (reached) allowed[order[r]] = false;
      cumulative += prob[order[r]];
      if (cumulative >= p.top_p * kept) reached = true;
    }
  }
  double kept = 0;
  for (size_t i = 0; i < v; ++i) kept += allowed[i] ? prob[i] : 0;
  for (size_t i = 0; i < v; ++i) prob[i] = allowed[i] ? prob[i] / kept : 0;
  return prob;
}

}  // namespace

TEST_CASE("sampled frequencies match the temperature, top-k and top-p distribution") {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<SamplingParams> cases = {
      {1.0, 0, 1.0}, {0.5, 0, 1.0}, {1.7, 0, 1.0}, {1.0, 5, 1.0}, {1.0, 0, 0.8}, {0.8, 12, 0.9}, {1.0, 1, 1.0},
  };
  Sampler sampler;
  for (const SamplingParams& p : cases) {
    std::vector<float> logits(40);
    for (float& l : logits) l = normal(rng);
    std::vector<double> want = expected_distribution(logits, p);
    const int64_t draws = 200000;
    std::vector<int64_t> counts(logits.size(), 0);
    const uint64_t seed = rng();
    for (int64_t i = 0; i < draws; ++i) {
      SampledToken t = sampler.sample(logits.data(), 40, p, uniform_from_counter(seed, i));
      if (t.token < 0 || t.token >= 40) FAIL("token " << t.token << " outside the vocabulary");
      ++counts[t.token];
    }
    INFO("temperature " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p);
    for (size_t i = 0; i < want.size(); ++i) {
      if (want[i] == 0) CHECK_MESSAGE(counts[i] == 0, "token " << i << " is outside the allowed set");
    }
    int dof = 0;
    const double stat = testing::chi_square(counts, want, draws, &dof);
    const double critical = testing::chi_square_critical_p1e7(dof);
    CHECK_MESSAGE(stat < critical, "chi-square " << stat << " with " << dof << " degrees of freedom");
  }
}

TEST_CASE("log-probs: full temperature-scaled and truncated, against float64") {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 3.0f);
  Sampler sampler;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(64);
    for (float& l : logits) l = normal(rng);
    SamplingParams p{0.3 + (rng() % 100) / 50.0, static_cast<int64_t>(rng() % 20), 0.5 + (rng() % 50) / 100.0};
    SampledToken t = sampler.sample(logits.data(), 64, p, uniform_from_counter(rng(), 0));
    std::vector<double> full = expected_distribution(logits, {p.temperature, 0, 1.0});
    std::vector<double> truncated = expected_distribution(logits, p);
    REQUIRE(truncated[t.token] > 0);
    // float32 l/T rounds each logit by u·|l|/T; the log-sum-exp adds its 64-term sum
    // (64·u), the exps and the log (a few u): within (64 + 4 + 2·max|l|/T)·u (u = 2^-24),
    // from the arithmetic, so on Intel and AMD alike.
    double largest = 0;
    for (float l : logits) largest = std::max(largest, std::abs(static_cast<double>(l)) / p.temperature);
    const double bound = (64 + 4 + 2 * largest) * 0x1p-24;
    CHECK(std::abs(t.logprob - std::log(full[t.token])) <= bound);
    CHECK(std::abs(t.sampling_logprob - std::log(truncated[t.token])) <= bound);
  }
}

TEST_CASE("greedy picks the argmax and reports its temperature-1 log-prob") {
  std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.4f};
  Sampler sampler;
  SampledToken t = sampler.sample(logits.data(), 4, {0.0, 0, 1.0}, 0.99);
  CHECK(t.token == 1);
  double total = 0;
  for (float l : logits) total += std::exp(l);
  // 4 terms of size <= 2.5: within (4 + 4 + 2·2.5)·u = 7.7e-7 (u = 2^-24).
  CHECK(std::abs(t.logprob - (2.5 - std::log(total))) <= 13 * 0x1p-24);
}

TEST_CASE("the counter-based uniform stream is uniform and reproducible") {
  int64_t buckets[10] = {};
  for (uint64_t i = 0; i < 100000; ++i) {
    double u = uniform_from_counter(42, i);
    if (!(u >= 0 && u < 1)) FAIL("uniform draw " << u << " outside [0, 1)");
    ++buckets[static_cast<int>(u * 10)];
  }
  for (int64_t b : buckets) CHECK(std::abs(b - 10000) < 500);  // 5 standard deviations
  CHECK(uniform_from_counter(1, 2) == uniform_from_counter(1, 2));
  CHECK(uniform_from_counter(1, 2) != uniform_from_counter(2, 1));
}

TEST_CASE("invalid sampling parameters are named") {
  CHECK_THROWS_WITH(check_sampling_params({-1.0, 0, 1.0}), doctest::Contains("temperature must be >= 0"));
  CHECK_THROWS_WITH(check_sampling_params({1.0, -2, 1.0}), doctest::Contains("top_k must be >= 0"));
  CHECK_THROWS_WITH(check_sampling_params({1.0, 0, 1.5}), doctest::Contains("top_p must be in (0, 1]"));
  CHECK_THROWS_WITH(check_sampling_params({NAN, 0, 1.0}), doctest::Contains("temperature"));
}
