// actor/fused_attention.h against a float64 run of the composite attention (scores,
// mask, softmax, value product; GQA by repeating KV heads) and its autograd gradients, on
// fresh random inputs: query-head groups of 1, 2 and 4, causal and per-sequence (packed
// segments, padding) masks, lengths and head sizes that are not powers of two.
//
// Tolerances come from float32's unit roundoff u = 2^-24 and the sizes of the sums: a
// score is a D-term dot product, so its error is at most (D + 1)·u·A, A the largest
// Σ_d |q||k|·scale; softmax turns an absolute score error δ into a relative probability
// error of at most 2δ (plus a few u for exp and the division); every product after that
// sums L (or D) terms. So each result is within 4·(2(D + 1)·u·A + (L + D + 3)·u) of M, M
// the float64 size of the terms it sums (Σ p|v| for the output, the same sums of absolute
// values for each gradient), the factor 4 covering the products' own roundings.
#include "actor/fused_attention.h"

#include "tests/support/kernel_checks.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <cmath>
#include <random>

using namespace tandem;

namespace {

struct Case {
  int64_t batch, heads, kv_heads, length, head_dim;
  bool segments;  // per-sequence masks: two packed sequences and padding per row
};

// 0 where query i may read key j, -inf elsewhere: causal, within a segment; padding (0)
// reads only itself, as PolicyModel's layer_context builds it.
at::Tensor make_bias(const Case& c) {
  const float blocked = -std::numeric_limits<float>::infinity();
  at::Tensor causal = at::ones({c.length, c.length}, at::kBool).tril();
  if (!c.segments) return at::zeros({c.length, c.length}).masked_fill_(causal.logical_not(), blocked);
  at::Tensor segment_ids = at::zeros({c.batch, c.length}, at::kLong);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t first = 1 + b % (c.length / 2), second = c.length - 1 - b % 2;  // the rest is padding
    segment_ids[b].narrow(0, 0, first).fill_(1);
    segment_ids[b].narrow(0, first, second - first).fill_(2);
  }
  at::Tensor same = segment_ids.unsqueeze(2).eq(segment_ids.unsqueeze(1)).logical_and(segment_ids.unsqueeze(1).ne(0));
  at::Tensor allowed = same.logical_and(causal).logical_or(at::eye(c.length, at::kBool));
  return at::zeros(allowed.sizes()).masked_fill_(allowed.logical_not(), blocked).unsqueeze(1);
}

// The grouped sum over query heads of a [B, H, ...] tensor: [B, KV, ...].
at::Tensor group_sum(const at::Tensor& t, int64_t kv_heads) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape[1] = kv_heads;
  shape.insert(shape.begin() + 2, t.size(1) / kv_heads);
  return t.reshape(shape).sum(2);
}

double max_abs_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("fused attention matches float64 attention and its gradients") {
  std::mt19937_64 rng = testing::kernel_test_rng(1);  // TANDEM_TEST_SEED replays a run
  const double u = std::ldexp(1.0, -24);
  for (const Case c : {Case{3, 4, 4, 7, 8, false}, Case{2, 8, 2, 13, 16, false}, Case{2, 4, 1, 11, 32, true},
                       Case{4, 6, 3, 9, 12, true}}) {
    INFO("B " << c.batch << " H " << c.heads << " KV " << c.kv_heads << " L " << c.length << " D " << c.head_dim
              << (c.segments ? " segments" : " causal"));
    at::manual_seed(static_cast<int64_t>(rng() >> 1));
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    const at::Tensor q32 = at::randn({c.batch, c.heads, c.length, c.head_dim});
    const at::Tensor k32 = at::randn({c.batch, c.kv_heads, c.length, c.head_dim});
    const at::Tensor v32 = at::randn({c.batch, c.kv_heads, c.length, c.head_dim});
    const at::Tensor grad32 = at::randn({c.batch, c.length, c.heads * c.head_dim});
    const at::Tensor bias = make_bias(c);

    // float32, fused. q as a transposed view, as PolicyModel passes it.
    at::Tensor q = q32.transpose(1, 2).contiguous().transpose(1, 2).requires_grad_(true);
    at::Tensor k = k32.clone().requires_grad_(true), v = v32.clone().requires_grad_(true);
    REQUIRE(fused_attention_applies(q, k, v, bias));
    const at::Tensor out = fused_attention(q, k, v, bias, scale);
    out.backward(grad32);

    // float64, composite.
    const int64_t group = c.heads / c.kv_heads;
    at::Tensor qd = q32.to(at::kDouble).requires_grad_(true), kd = k32.to(at::kDouble).requires_grad_(true),
               vd = v32.to(at::kDouble).requires_grad_(true);
    const at::Tensor keys = kd.repeat_interleave(group, 1), values = vd.repeat_interleave(group, 1);
    const at::Tensor probs = at::softmax(at::matmul(qd, keys.transpose(-2, -1)) * scale + bias.to(at::kDouble), -1);
    const at::Tensor ref = at::matmul(probs, values).transpose(1, 2).reshape({c.batch, c.length, -1});
    const at::Tensor grad = grad32.to(at::kDouble);
    ref.backward(grad);

    // The sizes of the terms each result sums (see the top of the file).
    const at::Tensor p = probs.detach(), dout = grad.reshape({c.batch, c.length, c.heads, c.head_dim}).transpose(1, 2);
    const at::Tensor abs_keys = keys.detach().abs(), abs_values = values.detach().abs();
    const double a = (at::matmul(qd.detach().abs(), abs_keys.transpose(-2, -1)) * scale).max().item<double>();
    const double rho = 2 * (c.head_dim + 1) * u * a + (c.length + c.head_dim + 3) * u;
    const at::Tensor abs_dp = at::matmul(dout, values.detach().transpose(-2, -1)).abs();
    const at::Tensor abs_ds = scale * p * (abs_dp + (p * abs_dp).sum(-1, true));
    const double m_out = abs_values.max().item<double>();
    const double m_dq = at::matmul(abs_ds, abs_keys).max().item<double>();
    const double m_dk = group_sum(at::matmul(abs_ds.transpose(-2, -1), qd.detach().abs()), c.kv_heads).max().item<double>();
    const double m_dv = group_sum(at::matmul(p.transpose(-2, -1), dout.abs()), c.kv_heads).max().item<double>();

    CHECK(at::isfinite(out).all().item<bool>());
    // Bounds: u·(D + L) and the terms' float64 magnitudes (the file's top), not a measurement.
    CHECK(max_abs_difference(out, ref) <= 4 * rho * m_out);
    REQUIRE(q.grad().defined());
    CHECK(at::isfinite(q.grad()).all().item<bool>());
    CHECK(max_abs_difference(q.grad(), qd.grad()) <= 4 * rho * m_dq);
    CHECK(max_abs_difference(k.grad(), kd.grad()) <= 4 * rho * m_dk);
    CHECK(max_abs_difference(v.grad(), vd.grad()) <= 4 * rho * m_dv);
    // Not vacuous: the gradients are not zero.
    CHECK(q.grad().abs().max().item<double>() > 100 * 4 * rho * m_dq);
  }
}

TEST_CASE("fused attention refuses what it does not take, naming the shapes") {
  const at::Tensor q = at::randn({2, 4, 5, 8}), k = at::randn({2, 3, 5, 8});
  CHECK_THROWS_WITH(fused_attention(q, k, k, at::zeros({5, 5}), 1.0), doctest::Contains("KV heads must divide"));
  const at::Tensor k2 = at::randn({2, 2, 5, 8});
  CHECK_THROWS_WITH(fused_attention(q, k2, k2, at::zeros({4, 5}), 1.0), doctest::Contains("bias must be [L, L]"));
  CHECK_FALSE(fused_attention_applies(q.to(at::kDouble), k2, k2, at::zeros({5, 5})));
}
