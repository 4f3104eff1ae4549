// Data-parallel building blocks: Gloo collectives between ranks (threads over an
// in-memory store), flat parameters, AdamW against a float64 reference, LR schedules.
#include "core/error.h"
#include "learner/adamw.h"
#include "learner/collectives.h"
#include "learner/flat_parameters.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

using namespace tandem;

namespace {

// Runs body(rank) on `world` threads joined through one fresh in-memory rendezvous.
void run_ranks(int world, const std::function<void(Collectives&)>& body, double timeout_s = 30) {
  static int next_store = 0;
  const std::string rendezvous = "memory://test-" + std::to_string(next_store++);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto collectives = Collectives::create({rendezvous, rank, world, timeout_s});
        body(*collectives);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world; ++rank) CHECK_MESSAGE(errors[rank].empty(), "rank ", rank, ": ", errors[rank]);
}

}  // namespace

TEST_CASE("Gloo collectives: all-reduce, reduce-scatter, all-gather and broadcast match their definitions") {
  const int world = 3;
  const int64_t shard = 7;
  std::vector<at::Tensor> inputs;
  at::manual_seed(std::random_device{}());
  for (int r = 0; r < world; ++r) inputs.push_back(at::randn({shard * world}));
  at::Tensor sum = inputs[0] + inputs[1] + inputs[2];
  // Three float32 terms added in any order: each within 2·u·Σ|terms| of the exact sum,
  // so two orders within 4·u·Σ|terms| (u = 2^-24), element by element, on any CPU.
  const at::Tensor bound = 4 * 0x1p-24 * (inputs[0].abs() + inputs[1].abs() + inputs[2].abs());
  run_ranks(world, [&](Collectives& c) {
    at::Tensor mine = inputs[c.rank()].clone();
    c.all_reduce_sum(mine);
    CHECK(at::all((mine - sum).abs() <= bound).item<bool>());
    at::Tensor part = at::empty({shard});
    c.reduce_scatter_sum(inputs[c.rank()], part);
    CHECK(at::all((part - sum.narrow(0, c.rank() * shard, shard)).abs() <= bound.narrow(0, c.rank() * shard, shard))
              .item<bool>());
    CHECK(at::equal(inputs[c.rank()], inputs[c.rank()]));  // the input is left alone
    at::Tensor full = at::empty({shard * world});
    c.all_gather(at::full({shard}, static_cast<float>(c.rank() + 1)), full);
    for (int r = 0; r < world; ++r) CHECK(at::all(full.narrow(0, r * shard, shard) == r + 1).item<bool>());
    at::Tensor sent = inputs[c.rank()].clone();
    c.broadcast(sent, /*root=*/1);
    CHECK(at::equal(sent, inputs[1]));
    c.barrier();
  });
}

TEST_CASE("a rank whose peer is gone or stalled fails within the timeout, naming the collective") {
  for (bool stalled : {false, true}) {
    std::string error;
    double seconds = 0;
    run_ranks(2, [&](Collectives& c) {
      if (c.rank() == 1) {  // the peer leaves at once, or hangs past the timeout, without taking part
        if (stalled) std::this_thread::sleep_for(std::chrono::seconds(5));
        return;
      }
      at::Tensor t = at::ones({4});
      auto start = std::chrono::steady_clock::now();
      try {
        c.all_reduce_sum(t);
      } catch (const Error& e) {
        error = e.what();
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }, /*timeout_s=*/2);
    INFO("stalled peer: " << stalled);
    CHECK(error.find("learner rank 0/2: all_reduce failed") != std::string::npos);
    CHECK(seconds < 4.5);  // the 2 s timeout, not the peer's 5 s stall
  }
}

TEST_CASE("flat parameters: the model's tensors are views, backward fills the flat gradient") {
  at::Tensor a = at::randn({3, 4}).set_requires_grad(true);
  at::Tensor b = at::randn({5}).set_requires_grad(true);
  at::Tensor a_before = a.detach().clone(), b_before = b.detach().clone();
  FlatParameters flat({{"a", a}, {"b", b}}, /*world_size=*/4);
  CHECK(flat.numel() == 17);
  CHECK(flat.values().numel() == 20);  // padded to a multiple of 4
  CHECK(flat.shard_numel() == 5);
  CHECK(at::equal(flat.values().narrow(0, 0, 12).view({3, 4}), a_before));
  CHECK(at::equal(a.detach(), a_before));
  flat.values().narrow(0, 12, 5).fill_(2.0);  // writing the buffer writes the parameter
  CHECK(at::all(b.detach() == 2.0).item<bool>());

  ((a * a).sum() + (b * 3).sum()).backward();
  ((a * a).sum()).backward();  // accumulates
  CHECK(at::equal(flat.grads().narrow(0, 0, 12).view({3, 4}), 4 * a.detach()));  // 2a + 2a: exact in float32
  CHECK(at::all(flat.grads().narrow(0, 12, 5) == 3.0).item<bool>());
  CHECK(at::all(flat.grads().narrow(0, 17, 3) == 0.0).item<bool>());
  flat.zero_grads();
  CHECK(flat.grads().abs().sum().item<float>() == 0.0f);
}

TEST_CASE("AdamW matches a float64 reference over several steps") {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> normal;
  const int64_t n = 257;
  AdamWOptions o{0.9, 0.95, 1e-8, 0.1};
  std::vector<double> p(n), m(n, 0), v(n, 0);
  // How far float32 AdamW may land from this float64 one (u = 2^-24), per parameter:
  //  - m is a running sum of gradient terms that may cancel, so its rounding is relative
  //    to the same sum of |g| (m_abs): a few u of it (2 per step's multiply-add, with the
  //    bias correction and the division by √v̂ + ε: 8·u·m̂_abs/(√v̂ + ε) on the step);
  //    v's terms are all positive, so its relative error is a few u and enters the same 8;
  //  - lr × step and p - lr·step round once each (u·lr·|step| and u·|p|), as does the
  //    weight decay's multiply (u·|p|);
  //  - earlier errors carry forward multiplied by (1 - lr·weight_decay) <= 1.
  // All from the arithmetic, none measured: it holds on Intel and AMD alike.
  constexpr double u = 0x1p-24;
  std::vector<double> m_abs(n, 0), bound(n, 0);
  for (double& x : p) x = normal(rng);
  at::Tensor params = at::tensor(p, at::kDouble).to(at::kFloat);
  for (int64_t i = 0; i < n; ++i) p[i] = params[i].item<float>();  // start from the same rounded values
  AdamW adam(n, o);
  for (int step = 1; step <= 5; ++step) {
    std::vector<double> g(n);
    for (double& x : g) x = normal(rng) * (step % 2 ? 1.0 : 1e-3);
    const double lr = 1e-2 * step;
    adam.step(params, at::tensor(g, at::kDouble).to(at::kFloat), lr);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<float>(g[i]);
      p[i] *= 1 - lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * gi * gi;
      const double m_hat = m[i] / (1 - std::pow(o.beta1, step)), v_hat = v[i] / (1 - std::pow(o.beta2, step));
      const double step_size = m_hat / (std::sqrt(v_hat) + o.eps);
      p[i] -= lr * step_size;
      m_abs[i] = o.beta1 * m_abs[i] + (1 - o.beta1) * std::abs(gi);
      const double m_abs_hat = m_abs[i] / (1 - std::pow(o.beta1, step));
      bound[i] += lr * 8 * u * m_abs_hat / (std::sqrt(v_hat) + o.eps) + u * lr * std::abs(step_size) + 2 * u * std::abs(p[i]);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const double got = params[i].item<float>();
    if (!(std::abs(got - p[i]) <= bound[i])) {
      FAIL("parameter " << i << ": " << got << " vs " << p[i] << " (bound " << bound[i] << ")");
    }
  }
  CHECK(adam.steps() == 5);
}

TEST_CASE("learning-rate schedules: linear warm-up, then constant or cosine to zero") {
  CHECK(scheduled_learning_rate(1.0, "constant", 4, 0, 100) == doctest::Approx(0.25));
  CHECK(scheduled_learning_rate(1.0, "constant", 4, 3, 100) == doctest::Approx(1.0));
  CHECK(scheduled_learning_rate(1.0, "constant", 4, 50, 100) == doctest::Approx(1.0));
  CHECK(scheduled_learning_rate(2.0, "cosine", 0, 0, 10) == doctest::Approx(2.0));
  CHECK(scheduled_learning_rate(2.0, "cosine", 0, 5, 10) == doctest::Approx(1.0));
  CHECK(scheduled_learning_rate(2.0, "cosine", 0, 10, 10) == doctest::Approx(0.0));
  CHECK(scheduled_learning_rate(2.0, "cosine", 2, 2, 12) == doctest::Approx(2.0));
  CHECK_THROWS_WITH(scheduled_learning_rate(1.0, "linear", 0, 3, 10), doctest::Contains("unknown learning-rate schedule"));
}
