// The reward model's Bradley-Terry loss (learner/preference_loss.h) against a float64
// reference written from the definition, -log sigmoid(s_c - s_r) per pair: values,
// gradients, shares that add up across micro-batches, extreme margins, ties.
#include "learner/preference_loss.h"

#include "core/error.h"
#include "tests/support/objectives_checks.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace tandem;

namespace {

// -log sigmoid(m) = log(1 + e^-m), in float64 without overflow.
double reference_loss(double margin) { return margin > 0 ? std::log1p(std::exp(-margin)) : -margin + std::log1p(std::exp(margin)); }

// d/dm of -log sigmoid(m) = -sigmoid(-m).
double reference_slope(double margin) { return -1.0 / (1.0 + std::exp(margin)); }

}  // namespace

TEST_CASE("Bradley-Terry loss: values and gradients match float64; micro-batch shares add up") {
  const uint64_t seed = testing::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t pairs = std::uniform_int_distribution<int64_t>(1, 64)(gen);
    std::vector<float> c(pairs), r(pairs);
    for (int64_t i = 0; i < pairs; ++i) {
      c[i] = static_cast<float>(normal(gen));
      r[i] = static_cast<float>(normal(gen));
    }
    const at::Tensor chosen = at::tensor(c).requires_grad_(true), rejected = at::tensor(r).requires_grad_(true);
    const PreferenceLoss got = preference_loss(chosen, rejected, static_cast<double>(pairs));
    got.loss.backward();
    double want = 0, magnitude = 0, correct = 0;
    for (int64_t i = 0; i < pairs; ++i) {
      const double m = static_cast<double>(c[i]) - r[i];  // exact: both are float32
      want += reference_loss(m) / pairs;
      magnitude += std::abs(reference_loss(m)) / pairs;
      correct += m > 0 ? 1 : 0;
    }
    // float32: the margin rounds once (u |m|, and softplus' slope is below 1), softplus
    // itself a few u, and the sum of P terms (P - 1) u of the running total: bounded by
    // (P + 8) u (|m| + magnitude).
    const double u = std::numeric_limits<float>::epsilon() / 2;
    const double tolerance = (pairs + 8) * u * (magnitude + 12.0);
    CHECK(std::abs(got.loss.item<double>() - want) <= tolerance);
    CHECK(got.accuracy_sum == correct);
    const at::Tensor gc = chosen.grad(), gr = rejected.grad();
    for (int64_t i = 0; i < pairs; ++i) {
      const double m = static_cast<double>(c[i]) - r[i];
      const double slope = reference_slope(m) / pairs;
      // One rounding of the margin moves sigmoid by at most u |m| / 4, plus a few u of it.
      const double bound = (4 + std::abs(m)) * u / pairs + 1e-12;
      CHECK(std::abs(gc[i].item<double>() - slope) <= bound);
      CHECK(std::abs(gr[i].item<double>() + slope) <= bound);
    }
    // Split in two with the whole count: the shares add up to the whole.
    const int64_t half = pairs / 2;
    const double a = preference_loss(chosen.detach().narrow(0, 0, half), rejected.detach().narrow(0, 0, half),
                                     static_cast<double>(pairs))
                         .loss.item<double>();
    const double b = preference_loss(chosen.detach().narrow(0, half, pairs - half),
                                     rejected.detach().narrow(0, half, pairs - half), static_cast<double>(pairs))
                         .loss.item<double>();
    CHECK(std::abs(a + b - got.loss.item<double>()) <= tolerance);
  }
}

TEST_CASE("Bradley-Terry loss: extreme margins stay finite, ties count as wrong, bad inputs are Errors") {
  const at::Tensor chosen = at::tensor(std::vector<float>{100.0f, -100.0f, 0.5f}).requires_grad_(true);
  const at::Tensor rejected = at::tensor(std::vector<float>{0.0f, 0.0f, 0.5f}).requires_grad_(true);
  const PreferenceLoss got = preference_loss(chosen, rejected, 3.0);
  got.loss.backward();
  // softplus(-100) ~ 3.7e-44 (0 in float32), softplus(100) = 100, softplus(0) = log 2.
  // float32: log 2 rounds (u), the sum and the division by 3 add 2 u: 3 u ≈ 2e-7 < 1e-6.
  CHECK(got.loss.item<double>() == doctest::Approx((100.0 + std::log(2.0)) / 3).epsilon(1e-6));
  CHECK(got.accuracy_sum == 1);  // the tie is not a correct pair
  CHECK(at::isfinite(chosen.grad()).all().item<bool>());
  // -sigmoid(100) / 3: sigmoid rounds to 1 (1 - e^-100 is 1 in float32), / 3 one u.
  CHECK(chosen.grad()[1].item<double>() == doctest::Approx(-1.0 / 3).epsilon(1e-6));
  CHECK_THROWS_AS(preference_loss(chosen.detach(), rejected.detach(), 0.0), Error);
  CHECK_THROWS_AS(preference_loss(chosen.detach(), rejected.detach().narrow(0, 0, 2), 3.0), Error);
  CHECK_THROWS_AS(preference_loss(at::tensor(std::vector<float>{NAN}), at::tensor(std::vector<float>{0.0f}), 1.0), Error);
}
