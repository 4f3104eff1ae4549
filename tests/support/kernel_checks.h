// Shared by the kernel tests (test_kernels.cpp on the GPU, test_kernel_references.cpp on
// the CPU): the run's random seed, printed so that a failure reproduces
// (TANDEM_TEST_SEED=<seed> replays it), and the closeness check of STYLE.md,
// |got - want| <= atol + rtol * |want| on every element, where NaN never passes.
#pragma once

#include <doctest/doctest.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace tandem::testing {

inline uint64_t kernel_test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("TANDEM_TEST_SEED");
    std::random_device device;
    const uint64_t s = env != nullptr ? std::strtoull(env, nullptr, 10)
                                      : (static_cast<uint64_t>(device()) << 32) | static_cast<uint64_t>(device());
    std::printf("kernel tests: seed %" PRIu64 " (TANDEM_TEST_SEED=%" PRIu64 " reproduces this run)\n", s, s);
    return s;
  }();
  return seed;
}

// A generator per test case, so cases stay reproducible when run alone.
inline std::mt19937_64 kernel_test_rng(uint64_t salt) {
  return std::mt19937_64(kernel_test_seed() ^ (salt * 0x9E3779B97F4A7C15ull));
}

struct Tolerance {
  double atol;
  double rtol;
};

// Fails (without stopping the test case) naming the number of bad elements and the worst.
inline void check_close(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                        Tolerance tol) {
  REQUIRE_MESSAGE(got.size() == want.size(), what << ": " << got.size() << " values, " << want.size() << " expected");
  size_t bad = 0, worst = 0;
  double worst_ratio = -1, diff_sq = 0, ref_sq = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    const double limit = tol.atol + tol.rtol * std::abs(want[i]);
    diff_sq += err * err;
    ref_sq += want[i] * want[i];
    if (std::isfinite(got[i]) && std::isfinite(want[i]) && err <= limit) continue;
    ++bad;
    const double ratio = std::isfinite(err) ? err / limit : INFINITY;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (bad > 0) {
    FAIL_CHECK(what << ": " << bad << " of " << got.size() << " values outside atol " << tol.atol << " + rtol "
                    << tol.rtol << "; worst [" << worst << "] got " << got[worst] << ", want " << want[worst]
                    << "; |got - want| / |want| = " << std::sqrt(diff_sq / (ref_sq > 0 ? ref_sq : 1)));
  }
}

}  // namespace tandem::testing
