// actor/fused_layer_ops.h against float64 runs of the composites they replace (RMSNorm and
// SwiGLU) and their autograd gradients, on fresh random inputs.
//
// Tolerances from float32's unit roundoff u = 2^-24: RMSNorm sums its squares and dots in
// float64, so each output is a product of at most 4 rounded float32 factors (x, r, weight,
// and r's own rounding): within 8u of |x|·r·|w|; dx = r·(g - x·r²·mean(g·x)) within 8u of
// r·(|g| + |x|·r²·mean(|g·x|)), g = dy·w; the weight's gradient sums `rows` float32 terms:
// within (rows + 8)·u of Σ|dy·x|·r. SwiGLU is elementwise: exp, the division and at most 5
// products, each within a few u: 16u of the magnitude of each formula's terms. RoPE's
// outputs (and its gradient's) are two products and a sum: within 4u of |a·c| + |b·s|.
#include "actor/fused_layer_ops.h"

#include "tests/support/kernel_checks.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <cmath>
#include <random>

using namespace tandem;

namespace {

// max over elements of |got - want| / bound (each elementwise); <= 1 passes.
double worst(const at::Tensor& got, const at::Tensor& want, const at::Tensor& bound) {
  return ((got.to(at::kDouble) - want).abs() / bound).max().item<double>();
}

}  // namespace

TEST_CASE("fused RMSNorm matches float64 RMSNorm and its gradients") {
  std::mt19937_64 rng = testing::kernel_test_rng(1);  // TANDEM_TEST_SEED replays a run
  const double u = std::ldexp(1.0, -24), eps = 1e-6;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{3, 7, 64}, {5, 11, 4, 32}, {200, 96}}) {
    INFO("shape " << at::IntArrayRef(shape));
    at::manual_seed(static_cast<int64_t>(rng() >> 1));
    const int64_t dim = shape.back();
    const at::Tensor x32 = at::randn(shape) * 3, w32 = at::randn({dim}), dy32 = at::randn(shape);
    at::Tensor x = x32.clone().requires_grad_(true), w = w32.clone().requires_grad_(true);
    REQUIRE(fused_layer_ops_apply(x, w));
    const at::Tensor y = fused_rms_norm(x, w, eps);
    y.backward(dy32);

    at::Tensor xd = x32.to(at::kDouble).requires_grad_(true), wd = w32.to(at::kDouble).requires_grad_(true);
    const at::Tensor r = at::rsqrt(xd.pow(2).mean(-1, true) + eps);
    const at::Tensor ref = xd * r * wd;
    const at::Tensor dy = dy32.to(at::kDouble);
    ref.backward(dy);

    const at::Tensor rd = r.detach(), xa = xd.detach().abs(), g = (dy * wd.detach()).abs();
    // Derived from u and the sums' lengths (the file's top), so they hold on any x86 CPU.
    const at::Tensor y_bound = 8 * u * xa * rd * wd.detach().abs() + 1e-300;
    const at::Tensor dx_bound = 8 * u * rd * (g + xa * rd * rd * (g * xa).mean(-1, true)) + 1e-300;
    const int64_t rows = x32.numel() / dim;
    const at::Tensor dw_bound =
        (rows + 8) * u * (dy.abs() * xa * rd).reshape({rows, dim}).sum(0) + 1e-300;
    CHECK(at::isfinite(y).all().item<bool>());
    CHECK(worst(y, ref.detach(), y_bound) <= 1);
    CHECK(worst(x.grad(), xd.grad(), dx_bound) <= 1);
    CHECK(worst(w.grad(), wd.grad(), dw_bound) <= 1);
    CHECK(x.grad().abs().max().item<double>() > 0);
  }
}

TEST_CASE("fused SwiGLU matches float64 silu(gate) * up and its gradients") {
  std::mt19937_64 rng = testing::kernel_test_rng(2);
  const double u = std::ldexp(1.0, -24);
  at::manual_seed(static_cast<int64_t>(rng() >> 1));
  const at::Tensor gate32 = at::randn({37, 300}) * 4, up32 = at::randn({37, 300}), dy32 = at::randn({37, 300});
  at::Tensor gate = gate32.clone().requires_grad_(true), up = up32.clone().requires_grad_(true);
  const at::Tensor y = fused_swiglu(gate, up);
  y.backward(dy32);
  at::Tensor gd = gate32.to(at::kDouble).requires_grad_(true), ud = up32.to(at::kDouble).requires_grad_(true);
  const at::Tensor ref = at::silu(gd) * ud;
  ref.backward(dy32.to(at::kDouble));
  const at::Tensor a = gd.detach(), s = at::sigmoid(a), b = ud.detach().abs(), g = dy32.to(at::kDouble).abs();
  // 16u of each formula's terms: exp, a division and at most 5 products (the file's top).
  CHECK(worst(y, ref.detach(), 16 * u * a.abs() * s * b + 1e-300) <= 1);
  CHECK(worst(gate.grad(), gd.grad(), 16 * u * g * b * s * (1 + a.abs() * (1 - s)) + 1e-300) <= 1);
  CHECK(worst(up.grad(), ud.grad(), 16 * u * g * a.abs() * s + 1e-300) <= 1);
}

TEST_CASE("fused RoPE matches float64 rotate-half RoPE and its gradient, reading a transposed view in place") {
  std::mt19937_64 rng = testing::kernel_test_rng(3);
  const double u = std::ldexp(1.0, -24);
  at::manual_seed(static_cast<int64_t>(rng() >> 1));
  const int64_t B = 3, L = 9, H = 5, D = 12, half = D / 2;
  // cos and sin need not repeat their halves here: the formula must hold for any.
  const at::Tensor x32 = at::randn({B, L, H, D}) * 2, cos32 = at::randn({B, 1, L, D}), sin32 = at::randn({B, 1, L, D});
  const at::Tensor dy32 = at::randn({B, H, L, D});
  at::Tensor x = x32.clone().requires_grad_(true);
  const at::Tensor y = fused_rope(x.transpose(1, 2), cos32, sin32);
  CHECK(y.is_contiguous());
  y.backward(dy32);
  at::Tensor xd = x32.to(at::kDouble).requires_grad_(true);
  const at::Tensor xt = xd.transpose(1, 2), c = cos32.to(at::kDouble), s = sin32.to(at::kDouble);
  const at::Tensor rotated = at::cat({-xt.narrow(-1, half, half), xt.narrow(-1, 0, half)}, -1);
  const at::Tensor ref = xt * c + rotated * s;
  const at::Tensor dy = dy32.to(at::kDouble);
  ref.backward(dy);
  // Two products and a sum per output (either way): 4u of the terms' magnitudes.
  const at::Tensor y_bound = 4 * u * ((xt * c).abs() + (rotated * s).abs()) + 1e-300;
  // dx = rotate back: the same two-term sums of |dy|·|cos| and |dy|·|sin|.
  const at::Tensor dy_rotated = at::cat({dy.narrow(-1, half, half), -dy.narrow(-1, 0, half)}, -1);
  const at::Tensor s_swapped = at::cat({s.narrow(-1, half, half), s.narrow(-1, 0, half)}, -1);
  const at::Tensor dx_bound = (4 * u * ((dy * c).abs() + (dy_rotated * s_swapped).abs()) + 1e-300).transpose(1, 2);
  CHECK(worst(y, ref.detach(), y_bound) <= 1);
  CHECK(worst(x.grad(), xd.grad(), dx_bound) <= 1);
  CHECK(x.grad().abs().max().item<double>() > 0);
}

TEST_CASE("fused layer ops refuse shapes that do not match, naming them") {
  CHECK_THROWS_WITH(fused_rms_norm(at::randn({4, 8}), at::randn({7}), 1e-6), doctest::Contains("weight [7]"));
  CHECK_THROWS_WITH(fused_swiglu(at::randn({4, 8}), at::randn({4, 9})), doctest::Contains("gate [4, 8] and up [4, 9]"));
  CHECK_FALSE(fused_layer_ops_apply(at::randn({2}).to(at::kDouble), at::randn({2})));
  CHECK_THROWS_WITH(fused_rope(at::randn({2, 3, 4, 6}), at::randn({2, 1, 5, 6}), at::randn({2, 1, 5, 6})),
                    doctest::Contains("cos [2, 1, 5, 6]"));
}
