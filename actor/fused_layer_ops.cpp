#include "actor/fused_layer_ops.h"

#include "actor/aten_parallel.h"
#include "core/error.h"
#include "core/vector_exp.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tandem {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows in chunks a few per thread; each chunk's weight-gradient partial is summed in chunk
// order afterwards, so the result does not depend on which thread ran what.
int64_t row_chunks(int64_t rows) { return std::max<int64_t>(1, std::min<int64_t>(rows, 4 * at::get_num_threads())); }

typedef float Floats8 __attribute__((vector_size(32)));
typedef double Doubles8 __attribute__((vector_size(64)));

inline Doubles8 widened(const float* p) {
  Floats8 v;
  std::memcpy(&v, p, sizeof(v));
  return __builtin_convertvector(v, Doubles8);
}

// Σ a[j] · b[j] · c[j] in float64 (c null: Σ a[j] · b[j]) in 8 lanes, lane l summing the
// terms j ≡ l (mod 8), then the lanes in order and the tail (float products widened to
// float64 are exact; the sum's rounding is float64's). Written with vector types: the
// scalar form, one loop with a branch on c, did not vectorise and was most of RMSNorm's
// backward (perf, small preset).
double sum_of_products(const float* a, const float* b, const float* c, int64_t n) {
  Doubles8 lanes = {};
  int64_t j = 0;
  if (c) {
    for (; j + 8 <= n; j += 8) {
      Floats8 x, y;
      std::memcpy(&x, a + j, sizeof(x));
      std::memcpy(&y, b + j, sizeof(y));
      lanes += __builtin_convertvector(x * y, Doubles8) * widened(c + j);
    }
  } else {
    for (; j + 8 <= n; j += 8) lanes += widened(a + j) * widened(b + j);
  }
  double total = 0;
  for (int l = 0; l < 8; ++l) total += lanes[l];
  for (; j < n; ++j) total += static_cast<double>(c ? a[j] * b[j] : a[j]) * (c ? c[j] : b[j]);
  return total;
}

struct FusedRmsNorm : public torch::autograd::Function<FusedRmsNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    const at::Tensor xc = x.contiguous(), w = weight.contiguous();
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    at::Tensor y = at::empty_like(xc), rstd = at::empty({rows}, xc.options());
    const float *in = xc.data_ptr<float>(), *scale = w.data_ptr<float>();
    float *out = y.data_ptr<float>(), *r = rstd.data_ptr<float>();
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float* row = in + i * dim;
        const double squares = sum_of_products(row, row, nullptr, dim);
        const float ri = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(dim) + eps));
        r[i] = ri;
        float* o = out + i * dim;
        for (int64_t j = 0; j < dim; ++j) o[j] = (row[j] * ri) * scale[j];
      }
    });
    ctx->save_for_backward({xc, w, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    const at::Tensor dy = grads[0].contiguous();
    const int64_t dim = x.size(-1), rows = x.numel() / dim, chunks = row_chunks(rows);
    at::Tensor dx = at::empty_like(x);
    std::vector<float> partial(static_cast<size_t>(chunks * dim), 0.0f);
    const float *in = x.data_ptr<float>(), *scale = w.data_ptr<float>(), *r = rstd.data_ptr<float>(),
                *g = dy.data_ptr<float>();
    float* out = dx.data_ptr<float>();
    at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
      for (int64_t c = chunk_begin; c < chunk_end; ++c) {
        float* dw = partial.data() + c * dim;
        for (int64_t i = c * rows / chunks; i < (c + 1) * rows / chunks; ++i) {
          const float *row = in + i * dim, *grow = g + i * dim;
          const float ri = r[i];
          const double dot = sum_of_products(grow, scale, row, dim);  // Σ (dy · weight) · x
          const float k = static_cast<float>(dot / static_cast<double>(dim)) * ri * ri;
          float* o = out + i * dim;
          for (int64_t j = 0; j < dim; ++j) {
            o[j] = ri * (grow[j] * scale[j] - row[j] * k);
            dw[j] += grow[j] * (row[j] * ri);
          }
        }
      }
    });
    at::Tensor dweight = at::zeros_like(w);
    float* dw = dweight.data_ptr<float>();
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t j = 0; j < dim; ++j) dw[j] += partial[static_cast<size_t>(c * dim + j)];
    }
    return {dx, dweight, at::Tensor()};
  }
};

// One pass each way. Forward reads gate and up and writes the output and the sigmoid (kept
// for backward), the sigmoid by core/vector_exp.h: libtorch's sigmoid pass followed by the
// product pass took 0.68 ms a layer against 0.40 (small preset, fp32).
struct FusedSwiglu : public torch::autograd::Function<FusedSwiglu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    const at::Tensor gc = gate.contiguous(), uc = up.contiguous();
    at::Tensor y = at::empty_like(gc), sig = at::empty_like(gc);
    const float *a = gc.data_ptr<float>(), *b = uc.data_ptr<float>();
    float *out = y.data_ptr<float>(), *s = sig.data_ptr<float>();
    at::parallel_for(0, gc.numel(), 16384, [&](int64_t begin, int64_t end) {
      cpu::for_each_block16(begin, end, [&](int64_t i, int64_t n) {
        const cpu::Floats16 g = cpu::load_floats16(a + i, n);
        const cpu::Floats16 sg = 1.0f / (1.0f + cpu::exp_floats16(-g));
        cpu::store_floats16(s + i, sg, n);
        cpu::store_floats16(out + i, g * sg * cpu::load_floats16(b + i, n), n);
      });
    });
    ctx->save_for_backward({gc, uc, sig});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1], &sig = saved[2];
    const at::Tensor dy = grads[0].contiguous();
    at::Tensor dgate = at::empty_like(gate), dup = at::empty_like(up);
    const float *a = gate.data_ptr<float>(), *b = up.data_ptr<float>(), *s = sig.data_ptr<float>(),
                *g = dy.data_ptr<float>();
    float *da = dgate.data_ptr<float>(), *db = dup.data_ptr<float>();
    at::parallel_for(0, gate.numel(), 16384, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        da[i] = g[i] * b[i] * s[i] * (1.0f + a[i] * (1.0f - s[i]));
        db[i] = g[i] * a[i] * s[i];
      }
    });
    return {dgate, dup};
  }
};

// y = rotate(x) over [B, H, L, D] rows; `sign` -1 rotates back (backward). x's rows at
// strides (b, h, l), its last dimension contiguous; y contiguous.
void rotate_rows(const float* x, int64_t sb, int64_t sh, int64_t sl, const float* cos, const float* sin, int64_t B,
                 int64_t H, int64_t L, int64_t D, float sign, float* y) {
  const int64_t half = D / 2;
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      for (int64_t l = 0; l < L; ++l) {
        const float* in = x + b * sb + h * sh + l * sl;
        const float *c = cos + (b * L + l) * D, *s = sin + (b * L + l) * D;
        float* out = y + (bh * L + l) * D;
        if (sign > 0) {
          for (int64_t j = 0; j < half; ++j) {
            out[j] = in[j] * c[j] - in[j + half] * s[j];
            out[j + half] = in[j + half] * c[j + half] + in[j] * s[j + half];
          }
        } else {
          for (int64_t j = 0; j < half; ++j) {
            out[j] = in[j] * c[j] + in[j + half] * s[j + half];
            out[j + half] = in[j + half] * c[j + half] - in[j] * s[j];
          }
        }
      }
    }
  });
}

struct FusedRope : public torch::autograd::Function<FusedRope> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const at::Tensor xs = x.stride(3) == 1 ? x : x.contiguous();
    const at::Tensor c = cos.contiguous(), s = sin.contiguous();
    at::Tensor y = at::empty(x.sizes(), x.options());
    rotate_rows(xs.data_ptr<float>(), xs.stride(0), xs.stride(1), xs.stride(2), c.data_ptr<float>(), s.data_ptr<float>(),
                x.size(0), x.size(1), x.size(2), x.size(3), 1.0f, y.data_ptr<float>());
    ctx->save_for_backward({c, s});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor dy = grads[0].contiguous();
    at::Tensor dx = at::empty(dy.sizes(), dy.options());
    rotate_rows(dy.data_ptr<float>(), dy.stride(0), dy.stride(1), dy.stride(2), saved[0].data_ptr<float>(),
                saved[1].data_ptr<float>(), dy.size(0), dy.size(1), dy.size(2), dy.size(3), -1.0f, dx.data_ptr<float>());
    return {dx, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

double float64_dot(const float* a, const float* b, int64_t n) { return sum_of_products(a, b, nullptr, n); }

bool fused_layer_ops_apply(const at::Tensor& a, const at::Tensor& b) {
  return a.device().is_cpu() && b.device().is_cpu() && a.scalar_type() == at::kFloat &&
         b.scalar_type() == at::kFloat;
}

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TANDEM_CHECK(fused_layer_ops_apply(x, weight), "fused_rms_norm: float32 CPU tensors only");
  TANDEM_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
               "fused_rms_norm: weight [{}] does not match the last dimension of x [{}]",
               fmt::join(weight.sizes(), ", "), fmt::join(x.sizes(), ", "));
  return FusedRmsNorm::apply(x, weight, eps);
}

at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  TANDEM_CHECK(fused_layer_ops_apply(x, cos) && fused_layer_ops_apply(sin, x), "fused_rope: float32 CPU tensors only");
  const bool shapes = x.dim() == 4 && x.size(3) % 2 == 0 && cos.dim() == 4 && cos.sizes() == sin.sizes() &&
                      cos.size(0) == x.size(0) && cos.size(1) == 1 && cos.size(2) == x.size(2) &&
                      cos.size(3) == x.size(3);
  TANDEM_CHECK(shapes, "fused_rope: x [B, H, L, D] (D even) with cos and sin [B, 1, L, D]; got x [{}], cos [{}], sin [{}]",
               fmt::join(x.sizes(), ", "), fmt::join(cos.sizes(), ", "), fmt::join(sin.sizes(), ", "));
  return FusedRope::apply(x, cos, sin);
}

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up) {
  TANDEM_CHECK(fused_layer_ops_apply(gate, up), "fused_swiglu: float32 CPU tensors only");
  TANDEM_CHECK(gate.sizes() == up.sizes(), "fused_swiglu: gate [{}] and up [{}] differ", fmt::join(gate.sizes(), ", "),
               fmt::join(up.sizes(), ", "));
  return FusedSwiglu::apply(gate, up);
}

}  // namespace tandem
