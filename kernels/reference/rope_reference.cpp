#include "kernels/reference/rope_reference.h"

#include <limits>

namespace tandem::kernels::reference {

namespace {

void rotate(double* head, int64_t head_dim, const double* c, const double* s) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double x1 = head[i], x2 = head[i + half];
    head[i] = x1 * c[i] - x2 * s[i];
    head[i + half] = x2 * c[i] + x1 * s[i];
  }
}

}  // namespace

void rope(double* q, int64_t q_stride, double* k, int64_t k_stride, const int64_t* positions, const double* cos,
          const double* sin, int64_t tokens, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
          int64_t max_positions) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t p = positions[t];
    auto each_head = [&](double* rows, int64_t stride, int64_t heads) {
      for (int64_t h = 0; h < heads; ++h) {
        double* head = rows + t * stride + h * head_dim;
        if (p < 0 || p >= max_positions) {
          for (int64_t i = 0; i < head_dim; ++i) head[i] = std::numeric_limits<double>::quiet_NaN();
        } else {
          rotate(head, head_dim, cos + p * half, sin + p * half);
        }
      }
    };
    each_head(q, q_stride, num_q_heads);
    each_head(k, k_stride, num_kv_heads);
  }
}

}  // namespace tandem::kernels::reference
