#include "kernels/reference/norm_act_reference.h"

#include <cmath>
#include <limits>

namespace tandem::kernels::reference {

void rms_norm(const double* x, const double* weight, int64_t rows, int64_t dim, double eps, double* out) {
  for (int64_t r = 0; r < rows; ++r) {
    double sum_sq = 0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += x[r * dim + i] * x[r * dim + i];
    const double scale = 1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = x[r * dim + i] * scale * weight[i];
  }
}

void fused_add_rms_norm(const double* x, double* residual, const double* weight, int64_t rows, int64_t dim, double eps,
                        double* out) {
  for (int64_t i = 0; i < rows * dim; ++i) residual[i] += x[i];
  rms_norm(residual, weight, rows, dim, eps, out);
}

void silu_mul(const double* gate_up, int64_t rows, int64_t dim, double* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) {
      const double g = gate_up[r * 2 * dim + i], u = gate_up[r * 2 * dim + dim + i];
      out[r * dim + i] = g / (1.0 + std::exp(-g)) * u;
    }
  }
}

void embedding(const int32_t* ids, const double* table, int64_t tokens, int64_t vocab, int64_t dim, double* out) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t id = ids[t];
    for (int64_t i = 0; i < dim; ++i) {
      out[t * dim + i] = id >= 0 && id < vocab ? table[id * dim + i] : std::numeric_limits<double>::quiet_NaN();
    }
  }
}

}  // namespace tandem::kernels::reference
