// The libtorch training module against the float64 reference, per architecture feature;
// packed and padded layouts against each sequence alone; token log-probs and entropy.
#include "actor/onednn_matmul.h"
#include "actor/policy_torch.h"
#include "tests/support/forward_tolerance.h"
#include "tests/support/reference_model.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <random>

using namespace tandem;
using namespace tandem::testing;

namespace {

// max |a - b| / (atol + rtol |b|) <= 1 over a row; NaN fails.
void check_close(const float* got, const std::vector<double>& want, double atol, double rtol, const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i) {
    const double tolerance = atol + rtol * std::abs(want[i]);
    if (!(std::abs(got[i] - want[i]) <= tolerance)) {
      FAIL(what << ": element " << i << " is " << got[i] << ", reference " << want[i] << " (tolerance " << tolerance << ")");
    }
  }
}

}  // namespace

TEST_CASE("training forward matches the float64 reference for every architecture feature") {
  std::random_device seed_source;
  const uint64_t seed = seed_source();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (const TestModel& m : test_models()) {
    SUBCASE(m.name.c_str()) {
      ModelWeights weights = random_model_weights(m.config, rng(), /*init_std=*/0.15, /*random_norms=*/true);
      PolicyModel model(m.config, weights, at::kFloat);
      // Long enough that llama3 rope scaling's three wavelength bands all matter.
      std::vector<int32_t> tokens = random_tokens(rng, 70, m.config.vocab_size);
      at::Tensor logits = model.forward(padded_layout({tokens})).contiguous();
      Matrix want = reference_logits(m.config, weights, tokens);
      for (size_t t = 0; t < tokens.size(); ++t) {
        // float32 against float64: forward_tolerance.h's bound from the arithmetic.
        check_close(logits[0][t].data_ptr<float>(), want[t], logit_tolerance(m.config, weights, 70), 0,
                    m.name + " token " + std::to_string(t));
      }
    }
  }
}

TEST_CASE("packed and padded batches compute what each sequence computes alone") {
  std::mt19937_64 rng(std::random_device{}());
  for (const TestModel& m : test_models()) {
    ModelWeights weights = random_model_weights(m.config, rng(), 0.15, true);
    PolicyModel model(m.config, weights, at::kFloat);
    std::vector<std::vector<int32_t>> sequences;
    for (int64_t length : {5, 13, 1, 9, 20}) sequences.push_back(random_tokens(rng, length, m.config.vocab_size));

    std::vector<at::Tensor> alone;
    for (const auto& s : sequences) alone.push_back(model.forward(padded_layout({s}))[0]);

    at::Tensor padded = model.forward(padded_layout(sequences, /*pad_id=*/3));
    std::vector<std::pair<int64_t, int64_t>> placement;
    TokenLayout packed_layout_ = packed_layout(sequences, 24, &placement);
    CHECK(packed_layout_.input_ids.size(0) > 1);  // the 20-token sequence needed a second row
    at::Tensor packed = model.forward(packed_layout_);
    for (size_t i = 0; i < sequences.size(); ++i) {
      const int64_t n = static_cast<int64_t>(sequences[i].size());
      INFO(m.name << " sequence " << i);
      // Two float32 forwards (other batch shapes, other blockings): each within the bound.
      const double agreement = 2 * logit_tolerance(m.config, weights, 24);
      CHECK(at::allclose(padded[i].narrow(0, 0, n), alone[i], 0, agreement));
      CHECK(at::allclose(packed[placement[i].first].narrow(0, placement[i].second, n), alone[i], 0, agreement));
    }
  }
}

TEST_CASE("token log-probs and entropy match float64 log-softmax at several temperatures") {
  std::mt19937_64 rng(std::random_device{}());
  const TestModel m = test_models()[3];
  ModelWeights weights = random_model_weights(m.config, rng(), 0.3, true);
  PolicyModel model(m.config, weights, at::kFloat);
  std::vector<std::vector<int32_t>> sequences = {random_tokens(rng, 11, m.config.vocab_size),
                                                 random_tokens(rng, 4, m.config.vocab_size)};
  for (double temperature : {1.0, 0.7, 1.6}) {
    TokenLayout layout = packed_layout(sequences, 16);
    TokenLogProbs lp = token_logprobs(model.forward(layout), layout, temperature);
    int64_t offset = 0;
    for (const auto& s : sequences) {
      Matrix logits = reference_logits(m.config, weights, s);
      CHECK_FALSE(lp.valid[0][offset].item<bool>());  // the first token of a sequence has no prediction
      CHECK(lp.logprobs[0][offset].item<float>() == 0.0f);
      for (size_t t = 1; t < s.size(); ++t) {
        std::vector<double> log_p = reference_log_softmax(logits[t - 1], temperature);
        double entropy = 0;
        for (double l : log_p) entropy -= std::exp(l) * l;
        const int64_t col = offset + static_cast<int64_t>(t);
        CHECK(lp.valid[0][col].item<bool>());
        // Each log-prob within δ of the float64 one moves each p by at most p·δ, so the
        // entropy -Σ p·log p moves by at most δ·(1 + H), plus its own vocab-long sum's V·u·H.
        const double delta = logprob_tolerance(m.config, weights, 16, temperature);
        CHECK(std::abs(lp.logprobs[0][col].item<float>() - log_p[s[t]]) <= delta);
        CHECK(std::abs(lp.entropy[0][col].item<float>() - entropy) <=
              delta * (1 + entropy) + static_cast<double>(m.config.vocab_size) * kUnitRoundoff * entropy);
      }
      offset += static_cast<int64_t>(s.size());
    }
    for (int64_t col = offset; col < 16; ++col) CHECK_FALSE(lp.valid[0][col].item<bool>());  // padding
  }
}

TEST_CASE("gradients reach every parameter and are finite") {
  const TestModel m = test_models()[2];
  ModelWeights weights = random_model_weights(m.config, 7, 0.15, true);
  PolicyModel model(m.config, weights, at::kFloat);
  std::mt19937_64 rng(3);
  TokenLayout layout = padded_layout({random_tokens(rng, 12, m.config.vocab_size), random_tokens(rng, 7, m.config.vocab_size)});
  TokenLogProbs lp = token_logprobs(model.forward(layout), layout);
  lp.logprobs.sum().backward();
  for (const auto& [name, p] : model.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(at::isfinite(p.grad()).all().item<bool>());
    CHECK(p.grad().abs().sum().item<float>() > 0);
  }
}

TEST_CASE("bfloat16 parameters stay close to float32") {
  const TestModel m = test_models()[0];
  ModelWeights weights = random_model_weights(m.config, 11, 0.15, true);
  std::mt19937_64 rng(5);
  TokenLayout layout = padded_layout({random_tokens(rng, 16, m.config.vocab_size)});
  at::Tensor f32 = PolicyModel(m.config, weights, at::kFloat).forward(layout);
  at::Tensor bf16 = PolicyModel(m.config, weights, at::kBFloat16).forward(layout);
  CHECK((bf16.scalar_type() == at::kFloat));
  // bf16 keeps 8 mantissa bits: ~0.4% per rounding, a few percent of the logit scale after 2 layers.
  CHECK((bf16 - f32).abs().max().item<float>() < 0.05 * f32.abs().max().item<float>() + 0.02);
}

TEST_CASE("kept casts of the weights give the values and gradients of a cast per product, until dropped") {
  if (!onednn_available()) {  // products through at::linear cast as they go: nothing is kept
    MESSAGE("skipped: this build has no oneDNN (actor/meson.build)");
    return;
  }
  const TestModel m = test_models()[2];
  ModelWeights weights = random_model_weights(m.config, 17, 0.15, true);
  std::mt19937_64 rng(9);
  const std::vector<TokenLayout> micro_batches = {
      padded_layout({random_tokens(rng, 12, m.config.vocab_size), random_tokens(rng, 7, m.config.vocab_size)}),
      padded_layout({random_tokens(rng, 9, m.config.vocab_size)})};
  // Float32 weights, bf16 products (learner.precision bf16): two micro-batches' gradients
  // summed, as an optimizer step's are. Same kernels, same operands: equal bit for bit.
  auto step = [&](const PolicyModel& model) {
    std::vector<at::Tensor> out;
    for (const TokenLayout& layout : micro_batches) {
      const at::Tensor logits = model.forward(layout);
      token_logprobs(logits, layout).logprobs.sum().backward();
      out.push_back(logits.detach());
    }
    for (const auto& [name, p] : model.named_parameters()) out.push_back(p.grad());
    return out;
  };
  PolicyModel cast_each_time(m.config, weights, at::kFloat, at::kBFloat16);
  PolicyModel kept(m.config, weights, at::kFloat, at::kBFloat16);
  const std::vector<at::Tensor> want = step(cast_each_time);
  std::vector<at::Tensor> got;
  {
    const KeepCastWeights keep(&kept, true);
    got = step(kept);
  }
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(at::equal(got[i], want[i]));
  }

  // Projection weights that change (an optimizer step) while the copies are kept are not
  // seen, which shows the copies are what the products read; once dropped, the next
  // products read the new weights. (Norm weights, biases and embeddings are read as they
  // are: left alone here.)
  const TokenLayout& layout = micro_batches[0];
  at::NoGradGuard no_grad;
  const KeepCastWeights keep(&kept, true);
  const at::Tensor before = kept.forward(layout);
  for (const PolicyModel* model : {&cast_each_time, &kept}) {
    for (const auto& [name, p] : model->named_parameters()) {
      if (name.find("_proj.weight") != std::string::npos || name == "lm_head.weight") p.mul_(1.25);
    }
  }
  CHECK(at::equal(kept.forward(layout), before));
  kept.set_keep_cast_weights(false);
  kept.set_keep_cast_weights(true);
  const at::Tensor after = kept.forward(layout);
  CHECK(at::equal(after, cast_each_time.forward(layout)));
  CHECK_FALSE(at::equal(after, before));
}

TEST_CASE("to_weights round-trips the parameters") {
  const TestModel m = test_models()[1];
  ModelWeights weights = random_model_weights(m.config, 13, 0.15, true);
  ModelWeights back = PolicyModel(m.config, weights, at::kFloat).to_weights();
  REQUIRE(back.tensors().size() == weights.tensors().size());
  for (const WeightTensor& t : weights.tensors()) CHECK(back.get(t.name).data == t.data);
}

TEST_CASE("the embedding's sparse gradient into a gradient buffer equals its dense gradient") {
  // With a dense .grad already there (the trainer's flat gradients), the embedding's
  // backward is sparse rows added in place (PolicyModel::embed). Distinct token ids: no
  // row is summed from two tokens in either path, so the two must agree bit for bit, the
  // tied LM head's dense gradient added once to each.
  std::mt19937_64 rng(std::random_device{}());
  for (const TestModel& m : test_models()) {
    INFO(m.name);
    const ModelWeights weights = random_model_weights(m.config, rng(), 0.15, true);
    std::vector<int32_t> tokens(static_cast<size_t>(std::min<int64_t>(20, m.config.vocab_size)));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7) % tokens.size());
    const at::Tensor mix = at::randn({1, static_cast<int64_t>(tokens.size()), m.config.head_rows()});
    auto embedding_grad = [&](bool with_buffer) {
      PolicyModel model(m.config, weights, at::kFloat);
      std::vector<at::Tensor> params = model.parameters();
      if (with_buffer) {
        for (at::Tensor& p : params) p.mutable_grad() = at::zeros_like(p);
      }
      (model.forward(padded_layout({tokens})) * mix).sum().backward();
      for (const auto& [name, p] : model.named_parameters()) {
        if (name != "model.embed_tokens.weight") continue;
        REQUIRE_FALSE(p.grad().is_sparse());
        return p.grad().clone();
      }
      FAIL("no model.embed_tokens.weight among the parameters");
      return at::Tensor();
    };
    const at::Tensor dense = embedding_grad(false), into_buffer = embedding_grad(true);
    CHECK(at::isfinite(dense).all().item<bool>());
    CHECK(dense.abs().sum().item<double>() > 0);
    CHECK(at::equal(dense, into_buffer));
  }
}
