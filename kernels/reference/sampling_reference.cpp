#include "kernels/reference/sampling_reference.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tandem::kernels::reference {

SampleReference sample(const float* logits, int64_t vocab, double temperature, int64_t top_k, double top_p,
                       double uniform) {
  TANDEM_CHECK(vocab > 0 && temperature >= 0 && top_k >= 0 && top_p > 0 && top_p <= 1 && uniform >= 0 && uniform < 1,
               "sampling reference: bad arguments");
  const size_t n = static_cast<size_t>(vocab);
  const bool greedy = temperature == 0;
  const double inv_t = greedy ? 1.0 : 1.0 / temperature;
  std::vector<double> z(n);
  for (size_t i = 0; i < n; ++i) z[i] = static_cast<double>(logits[i]) * inv_t;
  const double max_z = *std::max_element(z.begin(), z.end());
  std::vector<double> w(n);
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += w[i] = std::exp(z[i] - max_z);
  const double log_z = max_z + std::log(total);

  SampleReference result;
  result.probabilities.assign(n, 0.0);
  result.kept.assign(n, 0);
  if (greedy) {
    const size_t argmax = static_cast<size_t>(std::max_element(z.begin(), z.end()) - z.begin());  // first: lowest id
    result.token = static_cast<int32_t>(argmax);
    result.logprob = z[argmax] - log_z;
    result.probabilities[argmax] = 1;
    result.kept[argmax] = 1;
    return result;
  }

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  size_t kept = n;
  if (top_k > 0 && top_k < vocab) kept = static_cast<size_t>(top_k);
  if (top_p < 1) {
    double kept_mass = 0;
    for (size_t r = 0; r < kept; ++r) kept_mass += w[order[r]];
    double cumulative = 0;
    size_t prefix = 0;
    while (prefix < kept) {
      cumulative += w[order[prefix++]];
      if (cumulative >= top_p * kept_mass) break;
    }
    kept = prefix;
  }
  double kept_mass = 0;
  for (size_t r = 0; r < kept; ++r) {
    result.kept[order[r]] = 1;
    kept_mass += w[order[r]];
  }
  for (size_t i = 0; i < n; ++i) result.probabilities[i] = result.kept[i] ? w[i] / kept_mass : 0.0;

  const double target = uniform * kept_mass;
  double cumulative = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!result.kept[i] || w[i] == 0) continue;
    result.token = static_cast<int32_t>(i);  // the last possible one, if rounding leaves target above the sum
    cumulative += w[i];
    if (cumulative > target) break;
  }
  const bool truncated = kept < n;
  result.logprob = z[result.token] - log_z;
  result.sampling_logprob = truncated ? z[result.token] - max_z - std::log(kept_mass) : result.logprob;
  return result;
}

}  // namespace tandem::kernels::reference
