#include "rollout/cpu_ops.h"

#include "core/vector_exp.h"
#include "rollout/cpu_gemm.h"
#include "rollout/thread_pool.h"

#include <algorithm>
#include <cmath>

namespace tandem::cpu {

namespace {

// Below this size splitting costs more than it saves (a chunk hand-off is microseconds).
constexpr int64_t kParallelElements = int64_t{1} << 16;

// Splits [0, count) into ranges of at least `grain`, several per thread for balance,
// and runs body(begin, end) on each.
template <typename Body>
void parallel_ranges(ThreadPool& pool, int64_t count, int64_t grain, bool worth_it, Body body) {
  const int64_t threads = worth_it ? pool.threads() : 1;
  int64_t size = std::max<int64_t>(grain, (count + 4 * threads - 1) / (4 * threads));
  size = (size + grain - 1) / grain * grain;
  const int64_t ranges = (count + size - 1) / size;
  if (threads == 1 || ranges == 1) {
    body(int64_t{0}, count);
    return;
  }
  pool.run(ranges, [&](int64_t r) { body(r * size, std::min(count, (r + 1) * size)); });
}

}  // namespace

void linear(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const float* w, const float* bias, int64_t out,
            float* y) {
  gemm_nt(pool, x, rows, in, w, bias, out, y);
}

void linear(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const LinearWeight& w, const float* bias,
            int64_t out, float* y) {
  if (w.bf16) gemm_nt_bf16(pool, x, rows, in, w.bf16, bias, out, y);
  else gemm_nt(pool, x, rows, in, w.f32, bias, out, y);
}

void rms_norm(ThreadPool& pool, const float* x, int64_t rows, int64_t dim, const float* weight, double eps, float* y) {
  parallel_ranges(pool, rows, 1, rows * dim >= kParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * dim;
      double sum_sq = 0;
      for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
      const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps));
      float* yr = y + r * dim;
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
    }
  });
}

void rope(ThreadPool& pool, float* x, int64_t tokens, int64_t heads, int64_t head_dim, const float* cos,
          const float* sin) {
  const int64_t half = head_dim / 2;
  parallel_ranges(pool, tokens, 1, tokens * heads * head_dim >= kParallelElements, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
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
  });
}

void silu_mul(ThreadPool& pool, const float* gate, const float* up, int64_t count, float* out) {
  parallel_ranges(pool, count, 1024, count >= kParallelElements, [&](int64_t begin, int64_t end) {
    for_each_block16(begin, end, [&](int64_t i, int64_t n) {
      const Floats16 g = load_floats16(gate + i, n);
      store_floats16(out + i, g / (1.0f + exp_floats16(-g)) * load_floats16(up + i, n), n);
    });
  });
}

void exp_shifted(const float* x, int64_t count, float shift, float* y) {
  for_each_block16(0, count, [&](int64_t i, int64_t n) {
    store_floats16(y + i, exp_floats16(load_floats16(x + i, n) + shift), n);
  });
}

}  // namespace tandem::cpu
