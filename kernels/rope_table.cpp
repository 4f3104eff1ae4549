#include "kernels/rope.h"

#include "core/error.h"

#include <cmath>

namespace tandem::kernels {

void rope_cos_sin_table(const std::vector<double>& inverse_frequencies, int64_t max_positions, std::vector<float>& cos,
                        std::vector<float>& sin) {
  TANDEM_CHECK(max_positions > 0, "rope_cos_sin_table: max_positions must be > 0, got {}", max_positions);
  TANDEM_CHECK(!inverse_frequencies.empty(), "rope_cos_sin_table: no inverse frequencies");
  const int64_t half = static_cast<int64_t>(inverse_frequencies.size());
  cos.resize(static_cast<size_t>(max_positions * half));
  sin.resize(static_cast<size_t>(max_positions * half));
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      // As rollout/cpu_model.cpp does: the angle in float64, then rounded once.
      const double angle = static_cast<double>(p) * inverse_frequencies[static_cast<size_t>(i)];
      cos[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(angle));
      sin[static_cast<size_t>(p * half + i)] = static_cast<float>(std::sin(angle));
    }
  }
}

}  // namespace tandem::kernels
