// learner/head_logprobs against float64 references written with plain loops: the
// chosen tokens' log-probs and the entropies, and the gradients of a random weighting of
// both by central differences of that float64 forward (not by the formulas the fused
// backward uses). Tiles are made small so that rows and the vocabulary straddle several.
#include "learner/head_logprobs.h"

#include "core/error.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <cmath>
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

at::Tensor float_tensor(const std::vector<double>& values, std::vector<int64_t> shape) {
  return at::tensor(values, at::kDouble).to(at::kFloat).view(shape);
}

void check_close(const at::Tensor& actual, const std::vector<double>& expected, double atol, double rtol) {
  at::Tensor a = actual.to(at::kDouble).contiguous().flatten();
  REQUIRE(a.numel() == static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const double got = a[static_cast<int64_t>(i)].item<double>();
    INFO("element " << i << ": got " << got << ", expected " << expected[i]);
    REQUIRE(std::isfinite(got));
    CHECK(std::abs(got - expected[i]) <= atol + rtol * std::abs(expected[i]));
  }
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
      std::vector<double> lp(p.rows), h(p.rows);
      for (int64_t i = 0; i < p.rows; ++i) reference_row(p, p.hidden, p.weight, i, &lp[i], &h[i]);
      // Tiles of 1 x 1, uneven ones that split rows and vocabulary, and the default (one tile).
      for (HeadTiles tiles : {HeadTiles{1, 1}, HeadTiles{3, 10}, HeadTiles{2, 36}, HeadTiles{}}) {
        CAPTURE(seed);
        CAPTURE(scale);
        CAPTURE(tiles.rows);
        CAPTURE(tiles.vocab);
        HeadLogProbs out = head_logprobs(hidden, weight, targets, p.temperature, tiles);
        check_close(out.logprobs, lp, 2e-5, 2e-5);
        check_close(out.entropy, h, 2e-5, 2e-5);
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
  for (int uses : {3, 1, 2}) {
    CAPTURE(uses);
    std::vector<double> a(p.rows, 0.0), b(p.rows, 0.0);
    for (int64_t i = 0; i < p.rows; ++i) {
      if (uses & 1) a[i] = normal(rng);
      if (uses & 2) b[i] = normal(rng);
    }
    at::Tensor hidden = float_tensor(p.hidden, {p.rows, p.hidden_size}).set_requires_grad(true);
    at::Tensor weight = float_tensor(p.weight, {p.vocab, p.hidden_size}).set_requires_grad(true);
    HeadLogProbs out = head_logprobs(hidden, weight, at::tensor(p.targets, at::kLong), p.temperature, HeadTiles{4, 7});
    at::Tensor loss = at::zeros({}, at::kFloat);
    if (uses & 1) loss = loss + (out.logprobs * float_tensor(a, {p.rows})).sum();
    if (uses & 2) loss = loss + (out.entropy * float_tensor(b, {p.rows})).sum();
    loss.backward();
    check_close(hidden.grad(), central_differences(p, p.hidden, true, a, b), 2e-4, 2e-4);
    check_close(weight.grad(), central_differences(p, p.weight, false, a, b), 2e-4, 2e-4);
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
    at::NoGradGuard no_grad;
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
      // Each bf16 product is rounded once (relative 2^-8 at most): a log-prob moves by at
      // most twice the largest logit error, an entropy by a few times it.
      double largest = 0;
      for (int64_t v = 0; v < p.vocab; ++v) {
        double dot = 0;
        for (int64_t k = 0; k < p.hidden_size; ++k) dot += p.hidden[i * p.hidden_size + k] * p.weight[v * p.hidden_size + k];
        largest = std::max(largest, std::abs(dot / p.temperature));
      }
      const double bound = 4 * std::ldexp(largest, -8) + 1e-5;
      INFO("seed " << seed << " row " << i << " bound " << bound);
      const double got_lp = out.logprobs[i].item<double>(), got_h = out.entropy[i].item<double>();
      REQUIRE(std::isfinite(got_lp));
      REQUIRE(std::isfinite(got_h));
      CHECK(std::abs(got_lp - lp) <= bound);
      CHECK(std::abs(got_h - h) <= bound);
    }
    std::vector<double> a(p.rows), b(p.rows);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int64_t i = 0; i < p.rows; ++i) a[i] = normal(rng), b[i] = normal(rng);
    ((out.logprobs * float_tensor(a, {p.rows})).sum() + (out.entropy * float_tensor(b, {p.rows})).sum()).backward();
    CHECK((hidden.grad().scalar_type() == at::kFloat));  // each input's own dtype, summed in float32
    CHECK((weight.grad().scalar_type() == at::kFloat));
    for (bool of_hidden : {true, false}) {
      const std::vector<double> expected = central_differences(p, of_hidden ? p.hidden : p.weight, of_hidden, a, b);
      double scale = 0;
      for (double g : expected) scale = std::max(scale, std::abs(g));
      CAPTURE(of_hidden);
      check_close(of_hidden ? hidden.grad() : weight.grad(), expected, 3e-2 * scale, 3e-2);
    }
  }
}
