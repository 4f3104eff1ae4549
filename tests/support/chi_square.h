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

// The statistic a correct sampler exceeds with probability 1e-4 (a false alarm once in
// 10,000 runs), by the Wilson-Hilferty approximation.
inline double chi_square_critical_p1e4(int dof) {
  const double z = 3.719, k = std::max(dof, 1);
  return k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
}

}  // namespace tandem::testing
