#include "actor/fused_attention.h"

#include "actor/aten_parallel.h"
#include "core/error.h"

#include <Eigen/Core>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Matrix = Eigen::Map<RowMatrix>;
using ConstMatrix = Eigen::Map<const RowMatrix>;
// One head's rows inside the [L, H·D] output (or its gradient): D columns, a row every H·D.
using HeadColumns = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
using ConstHeadColumns = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;

struct Shape {
  int64_t batch, heads, kv_heads, length, head_dim;
  int64_t group() const { return heads / kv_heads; }
};

Shape shape_of(const at::Tensor& q, const at::Tensor& k) {
  return {q.size(0), q.size(1), k.size(1), q.size(2), q.size(3)};
}

// probs = softmax(q kᵀ · scale + bias) and out = probs v for every (sequence, query head).
void attention_forward(const Shape& s, const float* q, const float* k, const float* v, const float* bias,
                       int64_t bias_batch_stride, float scale, float* probs, float* out) {
  const int64_t L = s.length, D = s.head_dim, H = s.heads;
  at::parallel_for(0, s.batch * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / s.kv_heads, g = task % s.kv_heads;
      const ConstMatrix key(k + (b * s.kv_heads + g) * L * D, L, D);
      const ConstMatrix value(v + (b * s.kv_heads + g) * L * D, L, D);
      const float* mask = bias + b * bias_batch_stride;
      for (int64_t h = g * s.group(); h < (g + 1) * s.group(); ++h) {
        const ConstMatrix query(q + (b * H + h) * L * D, L, D);
        Matrix p(probs + (b * H + h) * L * L, L, L);
        p.noalias() = query * key.transpose();
        for (int64_t i = 0; i < L; ++i) {
          float* row = p.data() + i * L;
          const float* row_mask = mask + i * L;
          float top = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < L; ++j) {
            row[j] = row[j] * scale + row_mask[j];
            top = std::max(top, row[j]);
          }
          float sum = 0;
          for (int64_t j = 0; j < L; ++j) {
            row[j] = std::exp(row[j] - top);  // a masked key (-inf) gives exactly 0
            sum += row[j];
          }
          const float inverse = 1.0f / sum;
          for (int64_t j = 0; j < L; ++j) row[j] *= inverse;
        }
        HeadColumns o(out + (b * L * H + h) * D, L, D, Eigen::OuterStride<>(H * D));
        o.noalias() = p * value;
      }
    }
  });
}

// The gradients of q, k and v from the output's. dS = P ⊙ (dP - rowsum(dP ⊙ P)) with
// dP = dO vᵀ is the softmax's backward; the scale goes into dS once.
void attention_backward(const Shape& s, const float* q, const float* k, const float* v, const float* probs,
                        const float* grad_out, float scale, float* dq, float* dk, float* dv) {
  const int64_t L = s.length, D = s.head_dim, H = s.heads;
  at::parallel_for(0, s.batch * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    RowMatrix ds(L, L);  // per task list: one scratch per thread's range
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / s.kv_heads, g = task % s.kv_heads;
      const ConstMatrix key(k + (b * s.kv_heads + g) * L * D, L, D);
      const ConstMatrix value(v + (b * s.kv_heads + g) * L * D, L, D);
      Matrix key_grad(dk + (b * s.kv_heads + g) * L * D, L, D);
      Matrix value_grad(dv + (b * s.kv_heads + g) * L * D, L, D);
      key_grad.setZero();
      value_grad.setZero();
      for (int64_t h = g * s.group(); h < (g + 1) * s.group(); ++h) {
        const ConstMatrix query(q + (b * H + h) * L * D, L, D);
        const ConstMatrix p(probs + (b * H + h) * L * L, L, L);
        const ConstHeadColumns out_grad(grad_out + (b * L * H + h) * D, L, D, Eigen::OuterStride<>(H * D));
        value_grad.noalias() += p.transpose() * out_grad;
        ds.noalias() = out_grad * value.transpose();  // dP
        for (int64_t i = 0; i < L; ++i) {
          float* row = ds.data() + i * L;
          const float* p_row = p.data() + i * L;
          float dot = 0;
          for (int64_t j = 0; j < L; ++j) dot += row[j] * p_row[j];
          for (int64_t j = 0; j < L; ++j) row[j] = p_row[j] * (row[j] - dot) * scale;
        }
        Matrix query_grad(dq + (b * H + h) * L * D, L, D);
        query_grad.noalias() = ds * key;
        key_grad.noalias() += ds.transpose() * query;
      }
    }
  });
}

struct FusedAttention : public torch::autograd::Function<FusedAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& bias, double scale) {
    const Shape s = shape_of(q, k);
    const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous(), mask = bias.contiguous();
    at::Tensor probs = at::empty({s.batch, s.heads, s.length, s.length}, q.options());
    at::Tensor out = at::empty({s.batch, s.length, s.heads * s.head_dim}, q.options());
    const int64_t bias_batch_stride = mask.dim() == 4 ? s.length * s.length : 0;
    attention_forward(s, qc.data_ptr<float>(), kc.data_ptr<float>(), vc.data_ptr<float>(), mask.data_ptr<float>(),
                      bias_batch_stride, static_cast<float>(scale), probs.data_ptr<float>(), out.data_ptr<float>());
    ctx->save_for_backward({qc, kc, vc, probs});
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &probs = saved[3];
    const Shape s = shape_of(q, k);
    const at::Tensor grad_out = grad_outputs[0].contiguous();
    at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
    attention_backward(s, q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), probs.data_ptr<float>(),
                       grad_out.data_ptr<float>(), static_cast<float>(ctx->saved_data["scale"].toDouble()),
                       dq.data_ptr<float>(), dk.data_ptr<float>(), dv.data_ptr<float>());
    return {dq, dk, dv, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias) {
  for (const at::Tensor* t : {&q, &k, &v, &bias}) {
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat) return false;
  }
  return true;
}

at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
                           double scale) {
  TANDEM_CHECK(fused_attention_applies(q, k, v, bias), "fused_attention: float32 CPU tensors only");
  TANDEM_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes(), "fused_attention: q [B, H, L, D], k and v "
               "[B, KV, L, D]; got q [{}], k [{}], v [{}]", fmt::join(q.sizes(), ", "), fmt::join(k.sizes(), ", "),
               fmt::join(v.sizes(), ", "));
  const Shape s = shape_of(q, k);
  TANDEM_CHECK(k.size(0) == s.batch && k.size(2) == s.length && k.size(3) == s.head_dim && s.kv_heads > 0 &&
                   s.heads % s.kv_heads == 0,
               "fused_attention: k and v [{}] do not match q [{}] (KV heads must divide the query heads)",
               fmt::join(k.sizes(), ", "), fmt::join(q.sizes(), ", "));
  const bool one_mask = bias.dim() == 2 && bias.size(0) == s.length && bias.size(1) == s.length;
  const bool per_sequence = bias.dim() == 4 && bias.size(0) == s.batch && bias.size(1) == 1 &&
                            bias.size(2) == s.length && bias.size(3) == s.length;
  TANDEM_CHECK(one_mask || per_sequence, "fused_attention: bias must be [L, L] or [B, 1, L, L] with L {}, B {}; got [{}]",
               s.length, s.batch, fmt::join(bias.sizes(), ", "));
  return FusedAttention::apply(q, k, v, bias, scale);
}

}  // namespace tandem
