// The sampler: empirical frequencies against the exact distribution (chi-square),
// truncation never emitting a disallowed token, log-probs against float64; its vectorised
// row passes (rollout/sampler_rows.h) against long double, and inverse-CDF draws on
// 151,936-id rows against a long double cumulative sum.
#include "rollout/sampler.h"
#include "rollout/sampler_rows.h"
#include "tests/support/chi_square.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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
      // Logits spread so widely that some weights fall below the sampler's first cut
      // (2^-16): a nucleus past it, one within it, and a top-k larger than it holds.
      {1.0, 0, 0.9999999}, {1.0, 0, 0.9}, {1.0, 30, 1.0}, {0.7, 25, 0.999},
  };
  Sampler sampler;
  for (size_t c = 0; c < cases.size(); ++c) {
    const SamplingParams& p = cases[c];
    const float spread = c >= 7 ? 5.0f : 1.0f;
    std::vector<float> logits(40);
    for (float& l : logits) l = spread * normal(rng);
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

namespace {

// |got - want| / want, with NaN (or a wrong zero) as infinitely wrong.
double relative_error(double got, long double want) {
  if (want == 0) return got == 0 ? 0 : INFINITY;
  const long double e = std::fabs((static_cast<long double>(got) - want) / want);
  return std::isnan(static_cast<double>(e)) ? INFINITY : static_cast<double>(e);
}

}  // namespace

TEST_CASE("the vectorised exp against long double, over its whole range") {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<double> x = {0.0, -0.0, -1e-300, -0x1p-60, -0.34657359027997264, -0.3465735902799727,
                           -1.0397207708399179, -1.0, -2.0, -700.0, -708.0, -707.9999999999999};
  std::uniform_real_distribution<double> wide(-708.0, 0.0), narrow(-2.0, 0.0), exponent(-60, 9.46);  // 2^9.46 < 708
  for (int i = 0; i < 100000; ++i) x.push_back(wide(rng));
  for (int i = 0; i < 100000; ++i) x.push_back(narrow(rng));
  for (int i = 0; i < 100000; ++i) x.push_back(-std::exp2(exponent(rng)));  // magnitudes 2^-60 .. 708
  std::vector<double> got(x.size());
  sampler_rows::exp_nonpositive(x.data(), static_cast<int64_t>(x.size()), got.data());
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = relative_error(got[i], std::exp(static_cast<long double>(x[i])));
    if (!(e <= worst)) worst = e, worst_at = i;
  }
  INFO("worst x " << x[worst_at] << ": " << worst / 0x1p-53 << " units of 2^-53");
  // kExpRelativeError is derived from the polynomial's arithmetic (sampler_rows.cpp), not
  // measured: IEEE float64 without fused multiply-adds, so it holds on Intel and AMD alike.
  CHECK(worst <= sampler_rows::kExpRelativeError);
  // Below -708, and -inf (a masked logit), give exactly 0.
  std::vector<double> low = {-708.0000001, -745.2, -1e300, -INFINITY}, zero(low.size(), 1.0);
  sampler_rows::exp_nonpositive(low.data(), static_cast<int64_t>(low.size()), zero.data());
  for (double z : zero) CHECK(z == 0.0);
}

TEST_CASE("shifted_exps: each weight and their sum against long double, every tail length") {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<int64_t> sizes = {151936};
  for (int64_t n = 1; n <= 17; ++n) sizes.push_back(n);
  for (int64_t n : sizes) {
    std::vector<float> logits(static_cast<size_t>(n));
    for (float& l : logits) l = normal(rng);
    if (n > 3) logits[1] = -INFINITY;  // a masked id
    const double scale = 1.0 / (0.3 + static_cast<double>(rng() % 100) / 40.0);
    const sampler_rows::RowMaximum top = sampler_rows::maximum(logits.data(), n);
    REQUIRE(top.first_nan < 0);
    const double shift = static_cast<double>(top.value) * scale;
    std::vector<double> w(static_cast<size_t>(n), -1.0);
    const double sum = sampler_rows::shifted_exps(logits.data(), n, scale, shift, w.data());
    long double want_sum = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      // The argument is computed in float64 on both sides, as the sampler defines it.
      const long double want = std::exp(static_cast<long double>(static_cast<double>(logits[i]) * scale - shift));
      worst = std::max(worst, relative_error(w[i], want));
      want_sum += want;
    }
    INFO("n " << n << " scale " << scale);
    CHECK(worst <= sampler_rows::kExpRelativeError);
    // Each weight within kExpRelativeError; 8 running sums of n/8 terms then 3 pairwise levels
    // and the <= 7-term tail: within (n/8 + 10)u of the sum of positive terms more.
    const double bound = sampler_rows::kExpRelativeError + (static_cast<double>(n) / 8 + 10) * 0x1p-53;
    CHECK(relative_error(sum, want_sum) <= bound);
  }
}

TEST_CASE("maximum: the lowest id of the largest logit, and the first NaN") {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : {1, 5, 16, 17, 33, 1000, 151936}) {
    std::vector<float> logits(static_cast<size_t>(n));
    for (float& l : logits) l = normal(rng);
    const int64_t a = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    const int64_t b = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    logits[static_cast<size_t>(a)] = logits[static_cast<size_t>(b)] = 9.5f;  // a tie (or one id)
    sampler_rows::RowMaximum top = sampler_rows::maximum(logits.data(), n);
    CHECK(top.first_nan == -1);
    CHECK(top.value == 9.5f);
    CHECK(top.index == std::min(a, b));
    logits[static_cast<size_t>(n - 1)] = NAN;  // in the tail past the 16-wide blocks, or in a block
    logits[static_cast<size_t>(b)] = NAN;
    top = sampler_rows::maximum(logits.data(), n);
    CHECK(top.first_nan == std::min(b, n - 1));
  }
  std::vector<float> masked(40, -INFINITY);
  const sampler_rows::RowMaximum top = sampler_rows::maximum(masked.data(), 40);
  CHECK(top.value == -INFINITY);
  CHECK(top.index == 0);
}

TEST_CASE("a row with no finite maximum, or a NaN, is named") {
  Sampler sampler;
  std::vector<float> logits(40, -INFINITY);
  CHECK_THROWS_WITH(sampler.sample(logits.data(), 40, {1.0, 0, 1.0}, 0.5), doctest::Contains("finite maximum"));
  logits[7] = INFINITY;
  CHECK_THROWS_WITH(sampler.sample(logits.data(), 40, {1.0, 0, 1.0}, 0.5), doctest::Contains("finite maximum"));
  logits[3] = NAN;
  CHECK_THROWS_WITH(sampler.sample(logits.data(), 40, {1.0, 0, 1.0}, 0.5), doctest::Contains("logit 3 is NaN"));
}

TEST_CASE("151,936-id rows: each draw is the inverse CDF of a long double cumulative sum") {
  // The sampler takes the first id whose running sum of weights exceeds uniform * total.
  // Against the exact weights, its running sums are off by the weights' error
  // (kExpRelativeError) plus float64 summation (<= n u of the running sum), and its total
  // by the same: the drawn id t must have exact C(t) >= target (1 - d) and
  // C(t - 1) <= target (1 + d), with d = 2 (kExpRelativeError + (n + 10) u).
  const int64_t n = 151936;
  std::mt19937_64 rng(std::random_device{}());
  Sampler sampler;
  for (const double temperature : {1.0, 0.6}) {
    for (const float spread : {2.0f, 8.0f}) {  // flat, and peaked enough that a few ids hold most mass
      std::normal_distribution<float> normal(0.0f, spread);
      std::vector<float> logits(static_cast<size_t>(n));
      for (float& l : logits) l = normal(rng);
      const sampler_rows::RowMaximum top = sampler_rows::maximum(logits.data(), n);
      const double inv_t = 1.0 / temperature, max_z = static_cast<double>(top.value) * inv_t;
      std::vector<long double> cumulative(static_cast<size_t>(n));
      long double running = 0;
      for (int64_t i = 0; i < n; ++i) {
        running += std::exp(static_cast<long double>(static_cast<double>(logits[i]) * inv_t - max_z));
        cumulative[static_cast<size_t>(i)] = running;
      }
      const double d = 2 * (sampler_rows::kExpRelativeError + (static_cast<double>(n) + 10) * 0x1p-53);
      const uint64_t seed = rng();
      for (uint64_t draw = 0; draw < 40; ++draw) {
        const double u = uniform_from_counter(seed, draw);
        const SampledToken t = sampler.sample(logits.data(), n, {temperature, 0, 1.0}, u);
        REQUIRE(t.token >= 0);
        REQUIRE(t.token < n);
        const long double target = static_cast<long double>(u) * running;
        INFO("temperature " << temperature << " spread " << spread << " u " << u << " token " << t.token);
        CHECK(cumulative[static_cast<size_t>(t.token)] >= target * (1 - d));
        if (t.token > 0) CHECK(cumulative[static_cast<size_t>(t.token) - 1] <= target * (1 + d));
        // Its log-prob: log(w_t / total) in long double; float32 rounding of a value of size
        // |log-prob| plus the total's relative error.
        const long double exact = std::log(std::exp(static_cast<long double>(
                                               static_cast<double>(logits[t.token]) * inv_t - max_z)) / running);
        CHECK(std::fabs(static_cast<long double>(t.logprob) - exact) <=
              std::fabs(exact) * 0x1p-24 + 2 * (sampler_rows::kExpRelativeError + (n / 8.0 + 10) * 0x1p-53));
      }
    }
  }
}

TEST_CASE("151,936-id rows: top-k and top-p keep exactly the long double reference's tokens") {
  // The truncated set from the exact probabilities sorted in long double; the sampler sorts
  // only the ids above a cut. Every draw must come from the set, and over many draws
  // (uniform spaced over [0, 1)) the smallest and largest drawn probabilities must match
  // the set's ends: the set's last id is drawn at u -> 1, its first at u -> 0.
  const int64_t n = 151936;
  std::mt19937_64 rng(std::random_device{}());
  Sampler sampler;
  const std::vector<SamplingParams> cases = {{1.0, 0, 0.9}, {1.0, 0, 0.5}, {0.7, 50, 1.0}, {1.0, 40, 0.95},
                                             {1.0, 0, 0.999}, {1.0, 2000, 0.99}};
  for (const SamplingParams& p : cases) {
    for (const float spread : {2.0f, 6.0f}) {
      std::normal_distribution<float> normal(0.0f, spread);
      std::vector<float> logits(static_cast<size_t>(n));
      for (float& l : logits) l = normal(rng);
      std::vector<int32_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(),
                [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
      const double inv_t = 1.0 / p.temperature;
      const double max_z = static_cast<double>(logits[order[0]]) * inv_t;
      auto weight = [&](int32_t t) {
        return std::exp(static_cast<long double>(static_cast<double>(logits[t]) * inv_t - max_z));
      };
      size_t kept = p.top_k > 0 ? static_cast<size_t>(p.top_k) : static_cast<size_t>(n);
      long double kept_mass = 0;
      for (size_t i = 0; i < kept; ++i) kept_mass += weight(order[i]);
      if (p.top_p < 1) {
        long double cumulative = 0;
        size_t prefix = 0;
        while (prefix < kept && cumulative < p.top_p * kept_mass) cumulative += weight(order[prefix++]);
        kept = prefix;
      }
      std::vector<int32_t> rank(static_cast<size_t>(n));
      for (size_t i = 0; i < order.size(); ++i) rank[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
      size_t lowest_rank = SIZE_MAX, highest_rank = 0;
      for (int draw = 0; draw < 200; ++draw) {
        const double u = (draw + 0.5) / 200.0;
        const SampledToken t = sampler.sample(logits.data(), n, p, draw == 0 ? 0.0 : draw == 199 ? 1 - 0x1p-53 : u);
        REQUIRE(t.token >= 0);
        REQUIRE(t.token < n);
        const size_t r = static_cast<size_t>(rank[static_cast<size_t>(t.token)]);
        lowest_rank = std::min(lowest_rank, r);
        highest_rank = std::max(highest_rank, r);
      }
      INFO("top_k " << p.top_k << " top_p " << p.top_p << " spread " << spread << " kept " << kept);
      CHECK(lowest_rank == 0);
      CHECK(highest_rank == kept - 1);
    }
  }
}

TEST_CASE("shifted_exps gives the same bits as the plain build of the exp, summed in its documented order") {
  // shifted_exps runs the AVX-512 or AVX2 copy where the CPU has one, exp_nonpositive the
  // build's baseline (x86-64-v2 in a portable build); tests/kernels/check_portable.py also
  // runs this case on emulated CPUs without AVX-512 and without AVX.
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int64_t n : {4099, 8, 3}) {
    std::vector<float> logits(static_cast<size_t>(n));
    for (float& l : logits) l = normal(rng);
    const double scale = 1 / 0.7;
    const double shift = static_cast<double>(sampler_rows::maximum(logits.data(), n).value) * scale;
    std::vector<double> x(static_cast<size_t>(n)), plain(static_cast<size_t>(n)), fast(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<double>(logits[static_cast<size_t>(i)]) * scale - shift;
    sampler_rows::exp_nonpositive(x.data(), n, plain.data());
    const double sum = sampler_rows::shifted_exps(logits.data(), n, scale, shift, fast.data());
    double lanes[8] = {};
    const int64_t whole = n / 8 * 8;
    for (int64_t i = 0; i < whole; ++i) lanes[i % 8] += plain[static_cast<size_t>(i)];
    double want = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (int64_t i = whole; i < n; ++i) want += plain[static_cast<size_t>(i)];
    INFO("n " << n);
    CHECK(std::memcmp(plain.data(), fast.data(), plain.size() * sizeof(double)) == 0);
    CHECK(std::memcmp(&sum, &want, sizeof(double)) == 0);
  }
}

TEST_CASE("truncation_cut: the largest power of two whose ids suffice, against counting them directly") {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 5000);
    std::normal_distribution<float> normal(0.0f, 1.0f + static_cast<float>(rng() % 8));
    std::vector<float> logits(static_cast<size_t>(n));
    for (float& l : logits) l = normal(rng);
    if (n > 10) logits[3] = -INFINITY;  // a zero weight
    std::vector<double> w(static_cast<size_t>(n));
    const double shift = static_cast<double>(sampler_rows::maximum(logits.data(), n).value);
    const double sum = sampler_rows::shifted_exps(logits.data(), n, 1.0, shift, w.data());
    const int64_t min_ids = trial % 2 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 2)) : 0;
    const double min_mass = trial % 2 ? 0.0 : sum * static_cast<double>(rng() % 1000) / 1000.0;
    // The rule written out: ids with weight >= c, their mass in long double (the cut sums
    // in another order: a mass within rounding of min_mass may go either way, and the
    // random draws below make that a 1e-13 chance).
    auto suffices = [&](double c) {
      int64_t ids = 0;
      long double mass = 0;
      for (double x : w)
        if (x >= c && x > 0) ++ids, mass += x;
      return ids > 0 && ids >= min_ids && mass >= min_mass;
    };
    const double cut = sampler_rows::truncation_cut(w.data(), n, min_ids, min_mass);
    INFO("n " << n << " min_ids " << min_ids << " min_mass " << min_mass << " cut " << cut);
    if (cut < 0) {
      CHECK(!suffices(0x1p-1022));  // not even the smallest normal binade
    } else {
      CHECK(suffices(cut));
      CHECK(!suffices(2 * cut));
      CHECK(cut == std::ldexp(1.0, std::ilogb(cut)));
    }
  }
}
