// actor/fused_linear.h and actor/onednn_matmul.h against float64 products of the same
// rounded operands, on fresh random inputs.
//
// Tolerances from float32's unit roundoff u = 2^-24. Each output is a sum of K products of
// operands the kernel rounded to the compute dtype first (bfloat16 products are exact in
// float32): accumulated in float32 in any order, the sum is within (K - 1)·u·Σ|a·b| of the
// exact one, and writing it adds u·|sum|: (K + 1)·u·Σ|a·b| bounds both. The reference is
// the float64 product of the same rounded operands, so the bound holds on any x86 CPU and
// whichever kernel oneDNN picks. bfloat16 dot-product instructions flush subnormals to
// zero, which can lose at most K products of magnitude below 2^-126 each: K·2^-126 more.
#include "actor/fused_linear.h"
#include "actor/onednn_matmul.h"

#include "core/error.h"
#include "tests/support/kernel_checks.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <cmath>
#include <random>

using namespace tandem;

namespace {

const double u = std::ldexp(1.0, -24);

// max over elements of |got - want| / bound; <= 1 passes (NaN fails: the max is NaN).
double worst(const at::Tensor& got, const at::Tensor& want, const at::Tensor& bound) {
  const double w = ((got.to(at::kDouble) - want).abs() / bound).max().item<double>();
  return std::isnan(w) ? INFINITY : w;
}

// The operand as the kernel sees it: rounded to the compute dtype, then float64 (exactly).
at::Tensor rounded(const at::Tensor& t, at::ScalarType compute) { return t.to(compute).to(at::kDouble); }

// A build with another libtorch (torch_dir) has no oneDNN of its own: nothing to check.
void skip_without_onednn() { MESSAGE("skipped: this build has no oneDNN (actor/meson.build)"); }

// (K + 1)·u·|a|·|b| + K·2^-126, elementwise over the product a · b (the file's top).
at::Tensor product_bound(const at::Tensor& a, const at::Tensor& b) {
  const int64_t k = a.size(-1);
  return (k + 1) * u * at::matmul(a.abs(), b.abs()) + k * std::ldexp(1.0, -126) + 1e-300;
}

}  // namespace

TEST_CASE("fused linear matches float64 products of its rounded operands, and their gradients") {
  if (!onednn_available()) return skip_without_onednn();
  std::mt19937_64 rng = testing::kernel_test_rng(11);  // TANDEM_TEST_SEED replays a run
  struct Case {
    std::vector<int64_t> x_shape;
    int64_t out;
  };
  for (const at::ScalarType compute : {at::kFloat, at::kBFloat16}) {
    for (const Case& c : std::vector<Case>{{{3, 5, 64}, 48}, {{200, 96}, 10}, {{2, 33, 256}, 768}}) {
      INFO("compute " << c10::toString(compute) << ", x " << at::IntArrayRef(c.x_shape) << ", out " << c.out);
      at::manual_seed(static_cast<int64_t>(rng() >> 1));
      const int64_t k = c.x_shape.back();
      std::vector<int64_t> y_shape = c.x_shape;
      y_shape.back() = c.out;
      const at::Tensor x32 = at::randn(c.x_shape) * 2, w32 = at::randn({c.out, k}) * 0.5, dy32 = at::randn(y_shape);
      at::Tensor x = x32.clone().requires_grad_(true), w = w32.clone().requires_grad_(true);
      REQUIRE(fused_linear_applies(x, w, compute));
      const at::Tensor y = fused_linear(x, w, compute);
      REQUIRE((y.scalar_type() == at::kFloat));
      REQUIRE(y.sizes() == at::IntArrayRef(y_shape));
      y.backward(dy32);

      const at::Tensor xr = rounded(x32, compute).reshape({-1, k}), wr = rounded(w32, compute);
      const at::Tensor gr = rounded(dy32, compute).reshape({-1, c.out});
      CHECK(worst(y.reshape({-1, c.out}), at::matmul(xr, wr.t()), product_bound(xr, wr.t())) <= 1);
      CHECK(worst(x.grad().reshape({-1, k}), at::matmul(gr, wr), product_bound(gr, wr)) <= 1);
      CHECK(worst(w.grad(), at::matmul(gr.t(), xr), product_bound(gr.t(), xr)) <= 1);
      CHECK(w.grad().abs().max().item<double>() > 0);
    }
  }
}

TEST_CASE("fused linear with a frozen bfloat16 weight (a LoRA base) and a strided input") {
  if (!onednn_available()) return skip_without_onednn();
  std::mt19937_64 rng = testing::kernel_test_rng(12);
  at::manual_seed(static_cast<int64_t>(rng() >> 1));
  const at::Tensor base = at::randn({40, 6, 64});
  const at::Tensor x32 = base.transpose(0, 1);  // [6, 40, 64], not contiguous
  const at::Tensor w = (at::randn({24, 64}) * 0.3).to(at::kBFloat16);
  const at::Tensor dy32 = at::randn({6, 40, 24});
  for (const at::ScalarType compute : {at::kFloat, at::kBFloat16}) {
    INFO("compute " << c10::toString(compute));
    at::Tensor x = x32.clone().requires_grad_(true);
    const at::Tensor y = fused_linear(x, w, compute);
    y.backward(dy32);
    CHECK_FALSE(w.grad().defined());
    const at::Tensor xr = rounded(x32, compute).reshape({-1, 64}), wr = rounded(w, compute);
    const at::Tensor gr = rounded(dy32, compute).reshape({-1, 24});
    CHECK(worst(y.reshape({-1, 24}), at::matmul(xr, wr.t()), product_bound(xr, wr.t())) <= 1);
    CHECK(worst(x.grad().reshape({-1, 64}), at::matmul(gr, wr), product_bound(gr, wr)) <= 1);
  }
}

TEST_CASE("oneDNN matrix product reads transposed views in place and names bad shapes") {
  if (!onednn_available()) return skip_without_onednn();
  std::mt19937_64 rng = testing::kernel_test_rng(13);
  at::manual_seed(static_cast<int64_t>(rng() >> 1));
  for (const at::ScalarType type : {at::kFloat, at::kBFloat16}) {
    INFO("operands " << c10::toString(type));
    const at::Tensor a = at::randn({70, 33}).to(type), b = at::randn({50, 70}).to(type);
    const at::Tensor out = at::empty({33, 50});
    onednn_matmul(a.t(), b.t(), out);
    const at::Tensor ad = a.t().to(at::kDouble), bd = b.t().to(at::kDouble);
    CHECK(worst(out, at::matmul(ad, bd), product_bound(ad, bd)) <= 1);
  }
  const at::Tensor out = at::empty({4, 5});
  try {
    onednn_matmul(at::randn({4, 3}), at::randn({2, 5}), out);
    FAIL("a [4, 3] · b [2, 5] should not run");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("a [4, 3] · b [2, 5] -> out [4, 5] do not chain") != std::string::npos);
  }
  CHECK_THROWS_AS(onednn_matmul(at::randn({4, 3}), at::randn({3, 5}).to(at::kBFloat16), out), Error);
  // An empty inner dimension is a product of zeros.
  const at::Tensor zeros = at::full({4, 5}, 7.0f);
  onednn_matmul(at::empty({4, 0}), at::empty({0, 5}), zeros);
  CHECK(zeros.abs().max().item<double>() == 0);
}

TEST_CASE("fused linear reading a kept cast of its weight gives the same values and gradients") {
  if (!onednn_available()) return skip_without_onednn();
  std::mt19937_64 rng = testing::kernel_test_rng(14);
  at::manual_seed(static_cast<int64_t>(rng() >> 1));
  const at::Tensor x32 = at::randn({2, 17, 96}), w32 = at::randn({40, 96}) * 0.4, dy32 = at::randn({2, 17, 40});
  // Same kernel, same rounded operands, one process: equal bit for bit, no tolerance.
  auto run = [&](bool kept) {
    at::Tensor x = x32.clone().requires_grad_(true), w = w32.clone().requires_grad_(true);
    const at::Tensor y = fused_linear(x, w, at::kBFloat16, kept ? w32.to(at::kBFloat16) : at::Tensor());
    y.backward(dy32);
    return std::vector<at::Tensor>{y.detach(), x.grad(), w.grad()};
  };
  const std::vector<at::Tensor> cast_each_call = run(false), kept = run(true);
  for (size_t i = 0; i < kept.size(); ++i) {
    INFO("output " << i << " (y, dx, dw)");
    CHECK(at::equal(kept[i], cast_each_call[i]));
    CHECK(kept[i].abs().max().item<double>() > 0);
  }
  // A kept cast of the wrong dtype or shape is named, not multiplied.
  try {
    fused_linear(x32, w32, at::kBFloat16, w32.narrow(0, 0, 39).to(at::kBFloat16));
    FAIL("a [39, 96] cast of a [40, 96] weight should not run");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("kept cast must be BFloat16 [40, 96], got BFloat16 [39, 96]") != std::string::npos);
  }
  CHECK_THROWS_AS(fused_linear(x32, w32, at::kBFloat16, w32), Error);
}

TEST_CASE("fused linears over one input: each output, each weight's gradient, and the input's summed gradient") {
  if (!onednn_available()) return skip_without_onednn();
  std::mt19937_64 rng = testing::kernel_test_rng(15);
  for (const at::ScalarType compute : {at::kFloat, at::kBFloat16}) {
    INFO("compute " << c10::toString(compute));
    at::manual_seed(static_cast<int64_t>(rng() >> 1));
    const int64_t k = 80;
    const std::vector<int64_t> outs = {48, 16, 16};
    const at::Tensor x32 = at::randn({3, 11, k}) * 2;
    std::vector<at::Tensor> w32, dy32, weights;
    for (const int64_t n : outs) {
      w32.push_back(at::randn({n, k}) * 0.5);
      dy32.push_back(at::randn({3, 11, n}));
    }
    at::Tensor x = x32.clone().requires_grad_(true);
    for (size_t i = 0; i < outs.size(); ++i) weights.push_back(w32[i].clone().requires_grad_(i != 1));  // one frozen
    const std::vector<at::Tensor> ys = fused_linears(x, weights, compute);
    REQUIRE(ys.size() == outs.size());
    // Output 2 does not reach the loss: its gradient is undefined, and the rest still flow.
    ((ys[0] * dy32[0]).sum() + (ys[1] * dy32[1]).sum()).backward();

    const at::Tensor xr = rounded(x32, compute).reshape({-1, k});
    at::Tensor dx_want = at::zeros({xr.size(0), k}, at::kDouble), dx_magnitude = at::zeros_like(dx_want);
    int64_t depth = 0;  // the input gradient's terms per element: the reaching outputs' widths
    for (size_t i = 0; i < outs.size(); ++i) {
      CAPTURE(i);
      const at::Tensor wr = rounded(w32[i], compute), gr = rounded(dy32[i], compute).reshape({-1, outs[i]});
      CHECK(worst(ys[i].reshape({-1, outs[i]}), at::matmul(xr, wr.t()), product_bound(xr, wr.t())) <= 1);
      if (i == 2) continue;
      dx_want += at::matmul(gr, wr);
      dx_magnitude += at::matmul(gr.abs(), wr.abs());
      depth += outs[i];
      if (i == 0) CHECK(worst(weights[i].grad(), at::matmul(gr.t(), xr), product_bound(gr.t(), xr)) <= 1);
    }
    CHECK_FALSE(weights[1].grad().defined());
    CHECK_FALSE(weights[2].grad().defined());
    // The second product accumulates onto the first's float32 result, so each element is one
    // float32 sum of all `depth` products, in whatever grouping the kernel and the
    // accumulation pick. Any summation tree of D terms is within (D - 1)·u·Σ|terms|, the
    // products' own rounding (float32 only) adds u·Σ|a·b|, and bf16 subnormal flushing
    // D·2^-126: the file's product bound with K = D. Derived, so it holds on Intel and AMD.
    const at::Tensor dx_bound = (depth + 1) * u * dx_magnitude + depth * std::ldexp(1.0, -126) + 1e-300;
    CHECK(worst(x.grad().reshape({-1, k}), dx_want, dx_bound) <= 1);
  }
}

TEST_CASE("fused linears add into a weight's gradient buffer in place, as autograd would") {
  if (!onednn_available()) return skip_without_onednn();
  std::mt19937_64 rng = testing::kernel_test_rng(16);
  at::manual_seed(static_cast<int64_t>(rng() >> 1));
  const at::Tensor x32 = at::randn({2, 13, 64}), w32 = at::randn({24, 64}) * 0.4, previous = at::randn({24, 64});
  const at::Tensor dy = at::randn({2, 13, 24});
  for (const at::ScalarType compute : {at::kFloat, at::kBFloat16}) {
    INFO("compute " << c10::toString(compute));
    // Autograd's way: the product's gradient returned, then added to the existing .grad.
    at::Tensor w_autograd = w32.clone().requires_grad_(true);
    w_autograd.mutable_grad() = previous.clone();
    fused_linears(x32, {w_autograd}, compute)[0].backward(dy);
    // In place: the same .grad handed over as the buffer.
    at::Tensor w = w32.clone().requires_grad_(true);
    w.mutable_grad() = previous.clone();
    const at::Tensor buffer = gradient_buffer_of(w);
    REQUIRE(buffer.defined());
    fused_linears(x32, {w}, compute, {}, {buffer})[0].backward(dy);
    CHECK(w.grad().data_ptr() == buffer.data_ptr());
    // previous + Gᵀ·X, K = 26 products deep (the rows). Autograd: the product within its
    // bound, then one rounding of the sum, u·|want|. In place: one float32 sum of `previous`
    // and the K products in whatever grouping the kernel picks, within (K + 1)·u·Σ|a·b| (the
    // product bound) plus (K + 1)·u·|previous|, `previous` taking part in every partial sum
    // at worst. Both together bound both ways; derived, so it holds on Intel and AMD.
    const at::Tensor xr = rounded(x32, compute).reshape({-1, 64}), gr = rounded(dy, compute).reshape({-1, 24});
    const at::Tensor want = previous.to(at::kDouble) + at::matmul(gr.t(), xr);
    const int64_t depth = xr.size(0);
    const at::Tensor bound =
        product_bound(gr.t(), xr) + (depth + 1) * u * previous.to(at::kDouble).abs() + u * want.abs();
    CHECK(worst(w.grad(), want, bound) <= 1);
    CHECK(worst(w_autograd.grad(), want, bound) <= 1);
  }
  // What is not a dense float32 gradient of the parameter's shape is no buffer.
  CHECK_FALSE(gradient_buffer_of(w32).defined());  // takes no gradient
  at::Tensor no_grad_yet = w32.clone().requires_grad_(true);
  CHECK_FALSE(gradient_buffer_of(no_grad_yet).defined());
}
