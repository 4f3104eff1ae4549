// Goodness of fit for the sampling tests (rollout/sampler.h on CPU, kernels/sampling.h on
// the GPU): draws counted per token against the probabilities they should follow.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tandem::testing {

// Pearson's statistic over the cells expecting at least 5 draws (the others pooled into
// one cell); `dof` gets its degrees of freedom.
inline double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& prob, int64_t draws, int* dof) {
  double stat = 0, pooled_expected = 0, pooled_observed = 0;
  *dof = -1;
  for (size_t i = 0; i < prob.size(); ++i) {
    const double expected = prob[i] * static_cast<double>(draws);
    if (expected >= 5) {
      stat += (static_cast<double>(counts[i]) - expected) * (static_cast<double>(counts[i]) - expected) / expected;
      ++*dof;
    } else {
      pooled_expected += expected;
      pooled_observed += static_cast<double>(counts[i]);
    }
  }
  if (pooled_expected >= 5) {
    stat += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++*dof;
  }
  return stat;
}

// The statistic a correct sampler exceeds with probability 1e-7, by the Wilson-Hilferty
// approximation (z = 5.199 is the standard normal's 1 - 1e-7 quantile). Why that small:
// one CI run makes ~35 such checks on fresh seeds (the CPU sampler, and the GPU sampler
// under the simulator's plain, asan and tsan builds), so 1e-4 each failed about one CI
// run in 300 on a correct sampler (it did: 75.38 against 75.13 with 35 degrees of freedom,
// TANDEM_TEST_SEED=8459704524054624285). At 1e-7 that is one in ~300,000, and a real bias
// still fails by far: a wrong temperature or a leaked top-k id moves the statistic by
// hundreds at 2,000 draws.
inline double chi_square_critical_p1e7(int dof) {
  const double z = 5.199, k = std::max(dof, 1);
  return k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
}

}  // namespace tandem::testing
