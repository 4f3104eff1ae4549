#include "rollout/cpu_ops.h"

#include <Eigen/Core>
#include <omp.h>

#include <algorithm>
#include <cmath>

namespace tandem::cpu {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMajor>;
using StridedMatrixMap = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;

}  // namespace

void linear(const float* x, int64_t rows, int64_t in, const float* w, const float* bias, int64_t out, float* y) {
  // Chunks of output features, a multiple of 16 wide, several per thread for balance.
  const int64_t threads = omp_get_max_threads();
  int64_t chunk = std::max<int64_t>(16, (out + 4 * threads - 1) / (4 * threads));
  chunk = (chunk + 15) / 16 * 16;
  const int64_t chunks = (out + chunk - 1) / chunk;
  ConstMatrixMap x_map(x, rows, in);
#pragma omp parallel for schedule(static) if (chunks > 1 && rows * in * out > (1 << 15))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * chunk;
    const int64_t width = std::min(chunk, out - begin);
    ConstMatrixMap w_map(w + begin * in, width, in);
    StridedMatrixMap y_map(y + begin, rows, width, Eigen::OuterStride<>(out));
    y_map.noalias() = x_map * w_map.transpose();
    if (bias) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < width; ++j) y[r * out + begin + j] += bias[begin + j];
    }
  }
}

void rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, double eps, float* y) {
#pragma omp parallel for schedule(static) if (rows * dim > (1 << 14))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double sum_sq = 0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps));
    float* yr = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
#pragma omp parallel for schedule(static) if (tokens * heads * head_dim > (1 << 14))
  for (int64_t t = 0; t < tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c[i] - x2 * s[i];
        v[i + half] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

void silu_mul(const float* gate, const float* up, int64_t count, float* out) {
#pragma omp parallel for schedule(static) if (count > (1 << 15))
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace tandem::cpu
