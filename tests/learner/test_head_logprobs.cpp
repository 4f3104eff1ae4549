// learner/head_logprobs against float64 references written with plain loops: the
// chosen tokens' log-probs and the entropies, and the gradients of a random weighting of
// both by central differences of that float64 forward (not by the formulas the fused
// backward uses). Tiles are made small so that rows and the vocabulary straddle several.
#include "learner/head_logprobs.h"
#include "learner/head_rows.h"

#include "core/error.h"
#include "core/half.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace tandem;

namespace {

struct Problem {
  int64_t rows, hidden_size, vocab;
  double temperature;
  std::vector<double> hidden, weight;  // [rows, H], [V, H]
  std::vector<int64_t> targets;
};

Problem random_problem(int64_t rows, int64_t hidden_size, int64_t vocab, double temperature, double scale,
                       uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  Problem p{rows, hidden_size, vocab, temperature, {}, {}, {}};
  for (int64_t i = 0; i < rows * hidden_size; ++i) p.hidden.push_back(static_cast<float>(normal(rng)));
  for (int64_t i = 0; i < vocab * hidden_size; ++i) p.weight.push_back(static_cast<float>(normal(rng)));
  for (int64_t i = 0; i < rows; ++i) p.targets.push_back(static_cast<int64_t>(rng() % vocab));
  return p;
}

// Row i's log-prob of its target and entropy, in float64.
void reference_row(const Problem& p, const std::vector<double>& hidden, const std::vector<double>& weight, int64_t i,
                   double* logprob, double* entropy) {
  std::vector<double> z(p.vocab);
  double top = -INFINITY;
  for (int64_t v = 0; v < p.vocab; ++v) {
    double dot = 0;
    for (int64_t k = 0; k < p.hidden_size; ++k) dot += hidden[i * p.hidden_size + k] * weight[v * p.hidden_size + k];
    z[v] = dot / p.temperature;
    top = std::max(top, z[v]);
  }
  double sum = 0;
  for (double x : z) sum += std::exp(x - top);
  const double lse = top + std::log(sum);
  double h = 0;
  for (double x : z) h -= std::exp(x - lse) * (x - lse);
  *logprob = z[p.targets[i]] - lse;
  *entropy = h;
}

// sum_i a_i logprob_i + b_i entropy_i in float64.
double reference_loss(const Problem& p, const std::vector<double>& hidden, const std::vector<double>& weight,
                      const std::vector<double>& a, const std::vector<double>& b) {
  double loss = 0;
  for (int64_t i = 0; i < p.rows; ++i) {
    double lp = 0, h = 0;
    reference_row(p, hidden, weight, i, &lp, &h);
    loss += a[i] * lp + b[i] * h;
  }
  return loss;
}

std::vector<double> central_differences(const Problem& p, std::vector<double> values, bool of_hidden,
                                        const std::vector<double>& a, const std::vector<double>& b) {
  const double step = 1e-6;
  std::vector<double> grad(values.size());
  for (size_t j = 0; j < values.size(); ++j) {
    const double keep = values[j];
    values[j] = keep + step;
    const double up = of_hidden ? reference_loss(p, values, p.weight, a, b) : reference_loss(p, p.hidden, values, a, b);
    values[j] = keep - step;
    const double down = of_hidden ? reference_loss(p, values, p.weight, a, b) : reference_loss(p, p.hidden, values, a, b);
    values[j] = keep;
    grad[j] = (up - down) / (2 * step);
  }
  return grad;
}

constexpr double kUnitRoundoff = 0x1p-24;  // float32

// How far head_logprobs' float32 row i may lie from the float64 one, from the arithmetic
// (a first-order model of the rounding, u = 2^-24):
//  - a logit z_v = W_v·h_i / T is a sum of H products and a division: within
//    (H + 1)·u·S_i, S_i = max_v Σ_k |W_vk h_ik| / T;
//  - log p_t = z_t - lse moves by at most 2·δz, plus the log-sum-exp's own rounding: its
//    V-term sum (V·u), the exps (head_rows::kExpRelativeError, the CPU's vectorised exp:
//    30u) and the log (a few u), the subtraction (u·(|z_t| + |lse|), both under S_i + log V);
//  - each p_v then moves by at most p_v·δlp, so the entropy -Σ p log p moves by at most
//    δlp·(1 + H) plus its own V-term sum's V·u·H (from the arithmetic: Intel and AMD alike);
//  - with bf16 compute (learner.precision bf16) the logits are also rounded to bf16: each
//    by `logit_roundoff` (2^-8, one ulp) of its own size, at most of max_v |z_v|.
struct RowBound {
  double logits, logprob, entropy;
  double entropy_value, largest_abs_logprob;  // the float64 row's H and max_v |log p_v|
};

RowBound row_bound(const Problem& p, int64_t i, double logit_roundoff = 0) {
  std::vector<double> z(p.vocab);
  double spread = 0, top = -INFINITY;
  for (int64_t v = 0; v < p.vocab; ++v) {
    double dot = 0, magnitude = 0;
    for (int64_t k = 0; k < p.hidden_size; ++k) {
      const double term = p.hidden[i * p.hidden_size + k] * p.weight[v * p.hidden_size + k];
      dot += term;
      magnitude += std::abs(term);
    }
    z[v] = dot / p.temperature;
    top = std::max(top, z[v]);
    spread = std::max(spread, magnitude / p.temperature);
  }
  double sum = 0;
  for (double x : z) sum += std::exp(x - top);
  const double lse = top + std::log(sum);
  double h = 0, largest = 0, largest_logit = 0;
  for (double x : z) {
    largest_logit = std::max(largest_logit, std::abs(x));
    h -= std::exp(x - lse) * (x - lse);
    largest = std::max(largest, std::abs(x - lse));
  }
  const double u = kUnitRoundoff, vocab = static_cast<double>(p.vocab);
  RowBound b;
  b.logits = (static_cast<double>(p.hidden_size) + 1) * u * spread + logit_roundoff * largest_logit;
  b.logprob = 2 * b.logits + head_rows::kExpRelativeError + (vocab + 4 + 2 * (spread + std::log(vocab))) * u;
  b.entropy = b.logprob * (1 + h) + vocab * u * h;
  b.entropy_value = h;
  b.largest_abs_logprob = largest;
  return b;
}

// |actual - expected| <= bound, element by element; NaN never passes.
void check_within(const at::Tensor& actual, const std::vector<double>& expected, const std::vector<double>& bound) {
  at::Tensor a = actual.to(at::kDouble).contiguous().flatten();
  REQUIRE(a.numel() == static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const double got = a[static_cast<int64_t>(i)].item<double>();
    INFO("element " << i << ": got " << got << ", expected " << expected[i] << ", bound " << bound[i]);
    REQUIRE(std::isfinite(got));
    CHECK(std::abs(got - expected[i]) <= bound[i]);
  }
}

// How far head_logprobs' float32 gradients of Σ_i a_i·log p_i + b_i·H_i may lie from the
// exact ones. Each entry is a sum over the vocabulary (of the hidden state) or the rows (of
// the weight) of coefficient × input / T, with coefficients c_iv = a_i·(1[v = t_i] - p_v)
// - b_i·p_v·(log p_v + H_i):
//  - Σ_v |c_iv| <= 2|a_i| + 2|b_i|·H_i, and each |c_iv| <= 2|a_i| + |b_i|·(L_i + H_i),
//    L_i = max_v |log p_v|: these bound each entry's Σ|terms|;
//  - the terms carry the forward's relative errors (4·δlp·(1 + H_i) covers p, log p and H;
//    p's own exp adds head_rows::kExpRelativeError)
//    and the backward's own sums (R + V + H + 8 terms on any path): ε·Σ|terms|; with bf16
//    compute the coefficients are rounded to bf16 before the products (3·logit_roundoff);
//  - central differences in float64 with step s add 2^-52·Σ|loss terms|/s and s² times
//    the third derivative / 6 (s = 1e-6: both below 1e-9 here), so 1e-9 covers them.
struct GradientBounds {
  std::vector<double> hidden, weight;
};

GradientBounds gradient_bounds(const Problem& p, const std::vector<double>& a, const std::vector<double>& b,
                               double logit_roundoff = 0) {
  const double u = kUnitRoundoff;
  const double sums = static_cast<double>(p.rows + p.vocab + p.hidden_size + 8) * u;
  GradientBounds out{std::vector<double>(p.hidden.size()), std::vector<double>(p.weight.size(), 0.0)};
  for (int64_t i = 0; i < p.rows; ++i) {
    const RowBound r = row_bound(p, i, logit_roundoff);
    const double epsilon =
        sums + head_rows::kExpRelativeError + 3 * logit_roundoff + 4 * r.logprob * (1 + r.entropy_value);
    const double total = 2 * std::abs(a[i]) + 2 * std::abs(b[i]) * r.entropy_value;
    const double each = 2 * std::abs(a[i]) + std::abs(b[i]) * (r.largest_abs_logprob + r.entropy_value);
    for (int64_t k = 0; k < p.hidden_size; ++k) {
      double largest_weight = 0;
      for (int64_t v = 0; v < p.vocab; ++v) {
        largest_weight = std::max(largest_weight, std::abs(p.weight[v * p.hidden_size + k]));
      }
      out.hidden[i * p.hidden_size + k] = epsilon * total * largest_weight / p.temperature + 1e-9;
      for (int64_t v = 0; v < p.vocab; ++v) {
        out.weight[v * p.hidden_size + k] += epsilon * each * std::abs(p.hidden[i * p.hidden_size + k]) / p.temperature;
      }
    }
  }
  for (double& w : out.weight) w += 1e-9;
  return out;
}

at::Tensor float_tensor(const std::vector<double>& values, std::vector<int64_t> shape) {
  return at::tensor(values, at::kDouble).to(at::kFloat).view(shape);
}

}  // namespace

TEST_CASE("head_logprobs matches float64 log-softmax and entropy over chunks") {
  for (uint64_t seed : {11u, 12u, 13u}) {
    // Logit scales from near-uniform to very peaked (exp() overflows without a max shift).
    for (double scale : {0.3, 1.0, 8.0}) {
      const Problem p = random_problem(7, 8, 37, 0.7, scale, seed);
      at::Tensor hidden = float_tensor(p.hidden, {p.rows, p.hidden_size});
      at::Tensor weight = float_tensor(p.weight, {p.vocab, p.hidden_size});
      at::Tensor targets = at::tensor(p.targets, at::kLong);
      std::vector<double> lp(p.rows), h(p.rows), lp_bound(p.rows), h_bound(p.rows);
      for (int64_t i = 0; i < p.rows; ++i) {
        reference_row(p, p.hidden, p.weight, i, &lp[i], &h[i]);
        lp_bound[i] = row_bound(p, i).logprob;
        h_bound[i] = row_bound(p, i).entropy;
      }
      // Tiles of 1 x 1, uneven ones that split rows and vocabulary, and the default (one tile).
      for (HeadTiles tiles : {HeadTiles{1, 1}, HeadTiles{3, 10}, HeadTiles{2, 36}, HeadTiles{}}) {
        CAPTURE(seed);
        CAPTURE(scale);
        CAPTURE(tiles.rows);
        CAPTURE(tiles.vocab);
        HeadLogProbs out = head_logprobs(hidden, weight, targets, p.temperature, tiles);
        check_within(out.logprobs, lp, lp_bound);
        check_within(out.entropy, h, h_bound);
      }
    }
  }
}

TEST_CASE("head_logprobs gradients match central differences of the float64 forward") {
  const Problem p = random_problem(6, 5, 23, 1.3, 1.0, 21);
  std::mt19937_64 rng(22);
  std::normal_distribution<double> normal(0.0, 1.0);
  // Which outputs the loss reads: both, only the log-probs (entropy unused, as with an
  // entropy coefficient of 0), only the entropy.
  // Backward recomputes the logits (kept_logits_bytes 0) or reads the ones forward kept.
  for (int64_t kept_bytes : {int64_t{0}, HeadTiles{}.kept_logits_bytes})
  for (int uses : {3, 1, 2}) {
    CAPTURE(kept_bytes);
    CAPTURE(uses);
    std::vector<double> a(p.rows, 0.0), b(p.rows, 0.0);
    for (int64_t i = 0; i < p.rows; ++i) {
      if (uses & 1) a[i] = normal(rng);
      if (uses & 2) b[i] = normal(rng);
    }
    at::Tensor hidden = float_tensor(p.hidden, {p.rows, p.hidden_size}).set_requires_grad(true);
    at::Tensor weight = float_tensor(p.weight, {p.vocab, p.hidden_size}).set_requires_grad(true);
    HeadLogProbs out =
        head_logprobs(hidden, weight, at::tensor(p.targets, at::kLong), p.temperature, HeadTiles{4, 7, kept_bytes});
    at::Tensor loss = at::zeros({}, at::kFloat);
    if (uses & 1) loss = loss + (out.logprobs * float_tensor(a, {p.rows})).sum();
    if (uses & 2) loss = loss + (out.entropy * float_tensor(b, {p.rows})).sum();
    loss.backward();
    const GradientBounds bounds = gradient_bounds(p, a, b);
    check_within(hidden.grad(), central_differences(p, p.hidden, true, a, b), bounds.hidden);
    check_within(weight.grad(), central_differences(p, p.weight, false, a, b), bounds.weight);
  }
}

TEST_CASE("head_logprobs without autograd gives the same values, and bad shapes name the problem") {
  const Problem p = random_problem(4, 6, 19, 1.0, 1.0, 31);
  at::Tensor hidden = float_tensor(p.hidden, {p.rows, p.hidden_size}).set_requires_grad(true);
  at::Tensor weight = float_tensor(p.weight, {p.vocab, p.hidden_size});
  at::Tensor targets = at::tensor(p.targets, at::kLong);
  HeadLogProbs with_graph = head_logprobs(hidden, weight, targets, 1.0, HeadTiles{3, 5});
  HeadLogProbs without;
  {
    c10::NoGradGuard no_grad;
    without = head_logprobs(hidden, weight, targets, 1.0, HeadTiles{3, 5});
  }
  CHECK(with_graph.logprobs.requires_grad());
  CHECK_FALSE(without.logprobs.requires_grad());
  CHECK(at::equal(with_graph.logprobs.detach(), without.logprobs));
  CHECK(at::equal(with_graph.entropy.detach(), without.entropy));

  CHECK_THROWS_WITH_AS(head_logprobs(hidden, weight.t(), targets, 1.0), doctest::Contains("weight [V, H]"), Error);
  CHECK_THROWS_WITH_AS(head_logprobs(hidden, weight, targets.narrow(0, 0, 2), 1.0), doctest::Contains("targets"),
                       Error);
  CHECK_THROWS_WITH_AS(head_logprobs(hidden, weight, targets, 0.0), doctest::Contains("temperature"), Error);
  CHECK_THROWS_WITH_AS(head_logprobs(hidden, weight, targets, 1.0, HeadTiles{3, 5, -1}),
                       doctest::Contains("kept logits' bytes"), Error);
}

TEST_CASE("bf16 compute over float32 weights (learner.precision bf16) stays within bf16 rounding of float64") {
  for (uint64_t seed : {41u, 42u}) {
    const Problem exact = random_problem(9, 16, 53, 0.8, 1.0, seed);
    // The products see bf16 inputs: the float64 reference takes the same rounded values.
    auto to_bf16_values = [](const std::vector<double>& v) {
      const at::Tensor t = at::tensor(v, at::kDouble).to(at::kBFloat16).to(at::kDouble);
      return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    };
    Problem p = exact;
    p.hidden = to_bf16_values(exact.hidden);
    p.weight = to_bf16_values(exact.weight);
    at::Tensor hidden = float_tensor(exact.hidden, {p.rows, p.hidden_size}).set_requires_grad(true);
    at::Tensor weight = float_tensor(exact.weight, {p.vocab, p.hidden_size}).set_requires_grad(true);  // master
    HeadLogProbs out = head_logprobs(hidden, weight, at::tensor(p.targets, at::kLong), p.temperature, HeadTiles{4, 16},
                                     at::kBFloat16);
    REQUIRE((out.logprobs.scalar_type() == at::kFloat));
    REQUIRE((out.entropy.scalar_type() == at::kFloat));
    for (int64_t i = 0; i < p.rows; ++i) {
      double lp = 0, h = 0;
      reference_row(p, p.hidden, p.weight, i, &lp, &h);
      // The logits are rounded to bf16 once (row_bound's logit_roundoff, one ulp: 2^-8).
      const RowBound bound = row_bound(p, i, 0x1p-8);
      INFO("seed " << seed << " row " << i << " bounds " << bound.logprob << ", " << bound.entropy);
      const double got_lp = out.logprobs[i].item<double>(), got_h = out.entropy[i].item<double>();
      REQUIRE(std::isfinite(got_lp));
      REQUIRE(std::isfinite(got_h));
      CHECK(std::abs(got_lp - lp) <= bound.logprob);
      CHECK(std::abs(got_h - h) <= bound.entropy);
    }
    std::vector<double> a(p.rows), b(p.rows);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int64_t i = 0; i < p.rows; ++i) a[i] = normal(rng), b[i] = normal(rng);
    ((out.logprobs * float_tensor(a, {p.rows})).sum() + (out.entropy * float_tensor(b, {p.rows})).sum()).backward();
    CHECK((hidden.grad().scalar_type() == at::kFloat));  // each input's own dtype, summed in float32
    CHECK((weight.grad().scalar_type() == at::kFloat));
    const GradientBounds bounds = gradient_bounds(p, a, b, 0x1p-8);
    for (bool of_hidden : {true, false}) {
      const std::vector<double> expected = central_differences(p, of_hidden ? p.hidden : p.weight, of_hidden, a, b);
      CAPTURE(of_hidden);
      check_within(of_hidden ? hidden.grad() : weight.grad(), expected, of_hidden ? bounds.hidden : bounds.weight);
    }
  }
}

TEST_CASE("head_logprobs: logits kept from forward, or a kept cast of the weight, give a recompute's gradients bit for bit") {
  // No tolerance: all read the same products of the same operands through the same kernel
  // in this process, so any difference is a kept tile read from the wrong place (or a kept
  // cast that is not the weight's). A gradient buffer starts at zero, and a product added
  // to zero is the product: each tile's weight-gradient product is at most 10 deep (the
  // tile's rows), too short for any kernel to split along its depth.
  // Uneven tiles over both dimensions; float32 and bf16 products.
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  CAPTURE(seed);
  const Problem p = random_problem(37, 24, 301, 0.9, 2.0, seed);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor grad_lp = at::randn({p.rows}, generator), grad_h = at::randn({p.rows}, generator);
  for (at::ScalarType compute : {at::kFloat, at::kBFloat16}) {
    std::vector<at::Tensor> grads;
    struct Variant {
      int64_t kept_bytes;
      bool kept_cast, gradient_buffer;
    };
    const int64_t kept = HeadTiles{}.kept_logits_bytes;
    for (const Variant v : {Variant{0, false, false}, Variant{kept, false, false}, Variant{kept, true, false},
                            Variant{0, true, true}, Variant{kept, true, true}}) {
      at::Tensor hidden = float_tensor(p.hidden, {p.rows, p.hidden_size}).set_requires_grad(true);
      at::Tensor weight = float_tensor(p.weight, {p.vocab, p.hidden_size}).set_requires_grad(true);
      const at::Tensor cast = v.kept_cast ? weight.detach().to(compute) : at::Tensor();
      // A buffer as the trainer's: the weight's gradient exists (zeros) before backward.
      if (v.gradient_buffer) weight.mutable_grad() = at::zeros_like(weight);
      const at::Tensor buffer = v.gradient_buffer ? weight.grad() : at::Tensor();
      HeadLogProbs out = head_logprobs(hidden, weight, at::tensor(p.targets, at::kLong), p.temperature,
                                       HeadTiles{10, 64, v.kept_bytes}, compute, nullptr, 0, cast, buffer);
      ((out.logprobs * grad_lp).sum() + (out.entropy * grad_h).sum()).backward();
      REQUIRE(hidden.grad().isfinite().all().item<bool>());
      REQUIRE(weight.grad().isfinite().all().item<bool>());
      if (v.gradient_buffer) CHECK(weight.grad().data_ptr() == buffer.data_ptr());  // added in place
      grads.push_back(out.logprobs.detach());
      grads.push_back(hidden.grad());
      grads.push_back(weight.grad());
    }
    CAPTURE(c10::toString(compute));
    for (size_t i = 3; i < grads.size(); ++i) {
      CAPTURE(i);
      CHECK(at::equal(grads[i % 3], grads[i]));
    }
  }
  // A cast of another shape is named.
  const at::Tensor weight = at::randn({8, 4});
  try {
    head_logprobs(at::randn({3, 4}), weight, at::zeros({3}, at::kLong), 1.0, HeadTiles{}, at::kBFloat16, nullptr, 0,
                  weight.narrow(0, 0, 7).to(at::kBFloat16));
    FAIL("a [7, 4] cast of an [8, 4] weight should not run");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("kept cast must be BFloat16 [8, 4], got BFloat16 [7, 4]") != std::string::npos);
  }
}

TEST_CASE("head_rows: the vectorised float32 exp against float64, and the same bits from every copy") {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<float> x = {0.0f, -0.0f, 1e-30f, -1e-30f, 0.34657359f, -0.34657359f, -1.0f, 1.0f, 88.0f, -87.0f, -86.9999f};
  std::uniform_real_distribution<float> wide(-87.0f, 88.0f), narrow(-2.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) x.push_back(wide(rng));
  for (int i = 0; i < 100000; ++i) x.push_back(narrow(rng));
  std::vector<float> got(x.size()), baseline(x.size());
  head_rows::exp_f32(x.data(), static_cast<int64_t>(x.size()), got.data());
  head_rows::exp_f32_baseline(x.data(), static_cast<int64_t>(x.size()), baseline.data());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    const double e = std::abs(static_cast<double>(got[i]) - want) / want;
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  INFO("worst relative error " << worst / 0x1p-24 << " u");
  // kExpRelativeError is derived from the polynomial's float32 arithmetic (head_rows.cpp),
  // not measured: no fused multiply-adds in any copy, so it holds on Intel and AMD alike.
  CHECK(worst <= head_rows::kExpRelativeError);
  CHECK(std::memcmp(got.data(), baseline.data(), got.size() * sizeof(float)) == 0);
  std::vector<float> low = {-87.0001f, -100.0f, -1e30f, -INFINITY}, zero(low.size(), 1.0f);
  head_rows::exp_f32(low.data(), static_cast<int64_t>(low.size()), zero.data());
  for (float z : zero) CHECK(z == 0.0f);
}

TEST_CASE("head_rows: a row folded tile by tile, and its gradient, against float64") {
  std::mt19937_64 rng(std::random_device{}());
  for (const double spread : {0.5, 4.0, 20.0}) {
    std::normal_distribution<float> normal(0.0f, static_cast<float>(spread));
    const int64_t vocab = 1000 + static_cast<int64_t>(rng() % 3000);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& l : logits) l = normal(rng);
    const float inv_t = 1.0f / 0.7f;
    // float64 statistics of z = logits * inv_t, z formed in float32 as the kernel does.
    std::vector<double> z(logits.size());
    double top = -INFINITY;
    for (size_t v = 0; v < z.size(); ++v) top = std::max(top, z[v] = static_cast<double>(logits[v] * inv_t));
    double sum = 0, moment = 0;
    for (double zv : z) sum += std::exp(zv - top), moment += std::exp(zv - top) * (zv - top);
    const double lse = top + std::log(sum), entropy = std::log(sum) - moment / sum;
    head_rows::RowStatistics row{-INFINITY, 0, 0};
    for (int64_t v0 = 0; v0 < vocab; v0 += 333)  // tiles of 333 (a tail in every vector loop)
      head_rows::fold_tile_row(logits.data() + v0, std::min<int64_t>(333, vocab - v0), inv_t, row);
    const float got_lse = row.top + std::log(row.sum), got_entropy = std::log(row.sum) - row.moment / row.sum;
    // The terms: each within the exp's error of its size, the differences z - top exact
    // (Sterbenz: within a factor 2, or rounded once), float64 sums, then the rescaling across
    // tiles (float32: 3 roundings per tile boundary: under 40u of the sum) and the float32
    // log and division.
    const double u = 0x1p-24, tiles = static_cast<double>((vocab + 332) / 333);
    const double relative = head_rows::kExpRelativeError + (3 * tiles + 4) * u;
    INFO("spread " << spread << " vocab " << vocab);
    CHECK(std::abs(got_lse - lse) <= relative + std::abs(lse) * u);
    CHECK(std::abs(got_entropy - entropy) <= relative * (1 + std::abs(entropy) + std::abs(std::log(sum))) +
                                                  std::abs(entropy) * u);
    // The gradient of a·log p_t + b·H at each raw logit, in float64.
    const float g_lp = 0.75f, g_h = -1.25f;
    const int64_t target = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
    std::vector<float> grad(logits.size());
    head_rows::tile_row_gradient(logits.data(), vocab, inv_t, static_cast<float>(lse), static_cast<float>(entropy),
                                 g_h, g_lp, target, grad.data());
    // The bf16 form is the float32 one rounded as core/half.h rounds (libtorch's cast too).
    std::vector<uint16_t> grad_bf16(logits.size());
    head_rows::tile_row_gradient(logits.data(), vocab, inv_t, static_cast<float>(lse), static_cast<float>(entropy),
                                 g_h, g_lp, target, nullptr, grad_bf16.data());
    int64_t rounded_differently = 0;
    for (size_t v = 0; v < grad.size(); ++v) rounded_differently += grad_bf16[v] != float_to_bf16(grad[v]);
    CHECK(rounded_differently == 0);
    double worst = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double log_p = z[static_cast<size_t>(v)] - lse, p = std::exp(log_p);
      const double want = (-p * (g_h * (log_p + entropy) + g_lp) + (v == target ? g_lp : 0.0)) * inv_t;
      // log p in float32 (|log p| u, twice), p by the exp, then 4 roundings of the product
      // chain: relative to the terms' magnitudes.
      const double scale = (p * (std::abs(g_h) * (std::abs(log_p) + entropy) + std::abs(g_lp)) +
                            (v == target ? std::abs(g_lp) : 0.0)) * inv_t;
      // From the arithmetic (exp bound + counted float32 roundings), the same on any x86 CPU.
      const double bound = scale * (head_rows::kExpRelativeError + 8 * u) +
                           p * std::abs(g_h) * inv_t * 2 * u * (std::abs(log_p) + std::abs(lse) + entropy) +
                           p * (std::abs(g_h * (log_p + entropy)) + std::abs(g_lp)) * inv_t * 2 * u * (std::abs(lse) + 1);
      // exp_f32 flushes below e^-87 to 0 (documented): there the p term may be missing whole.
      const double flushed = log_p < -86.9 ? p * (std::abs(g_h * (log_p + entropy)) + std::abs(g_lp)) * inv_t * 1.01 : 0;
      const double error = std::abs(static_cast<double>(grad[static_cast<size_t>(v)]) - want) - flushed;
      CHECK_MESSAGE(error <= bound, "id " << v << ": got " << grad[static_cast<size_t>(v)] << ", want " << want);
      worst = std::max(worst, error);
    }
  }
}
