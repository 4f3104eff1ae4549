// LoRA (actor/lora.h): a model with adapters computes its merged model (W + (alpha/r)·B·A)
// and, with them off, its base model exactly; the adapters' gradients are the chain rule
// through the merged weight (dA = s·Bᵀ·dW, dB = s·dW·Aᵀ, from the merged model's own
// backward, in float64); Trainer trains only the adapters, keeps the base as the KL
// reference, and checkpoints and exports them in PEFT's format, loading back exactly.
#include "actor/lora.h"
#include "actor/policy_torch.h"
#include "core/error.h"
#include "core/files.h"
#include "core/safetensors.h"
#include "learner/collectives.h"
#include "learner/trainer.h"
#include "rollout/engine.h"
#include "rollout/merged_adapters.h"
#include "rollout/model_backend.h"
#include "tests/support/backend_prefill.h"
#include "tests/support/forward_tolerance.h"
#include "tests/support/reference_model.h"
#include "tests/support/trainer_ranks.h"
#include "tests/support/trainer_scenario.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

using namespace tandem;
using namespace tandem::testing;

namespace {

LoraSpec spec_for(const std::vector<std::string>& targets, int64_t rank = 4, double alpha = 8) {
  return {rank, alpha, lora_modules(targets), 0.0, 11};
}

// B starts at zero (the adapted model is the base one): give every B random values so that
// both adapters matter.
void randomize_b(PolicyModel& model, uint64_t seed) {
  c10::NoGradGuard no_grad;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (size_t i = 1; i < model.adapter_parameters().size(); i += 2) {
    at::Tensor b = model.adapter_parameters()[i].second;
    b.copy_(at::randn(b.sizes(), generator, at::kFloat).mul_(0.1));
  }
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  const double d = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  return std::isnan(d) ? INFINITY : d;
}

double relative_l2(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor w = want.to(at::kDouble);
  return (got.to(at::kDouble) - w).norm().item<double>() / w.norm().item<double>();
}

// One prefill of `tokens` on `backend` (blocks of 16 slots, in order): every position's logits.
std::vector<float> prefill_logits(ModelBackend& backend, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> table;
  for (int32_t b = 0; b * 16 < static_cast<int32_t>(tokens.size()); ++b) table.push_back(b);
  return tandem::testing::prefill_logits(backend, tokens, table);
}

ModelWeights as_weights(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<WeightTensor> out;
  for (const auto& [name, t] : tensors) {
    const at::Tensor c = t.contiguous();
    out.push_back({name, c.sizes().vec(), std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel())});
  }
  return ModelWeights(std::move(out));
}

}  // namespace

TEST_CASE("the rollout engine applies the learner's adapters unmerged, split or not, and merges them where it must") {
  // What an adapter-only weight sync relies on: the engine holds the base, takes the
  // adapters by name, and computes what the adapted learner computes. Both evaluate
  // W·x + s·B·(A·x) in float32 (no merged weight anywhere), the learner with libtorch's
  // sums, the engine with its own: two forwards of the merged model's size, within twice
  // forward_tolerance.h's logit bound. The merged fallback (backends that cannot apply
  // adapters) forms W + s·B·A once more: the same bound holds, on the merged weights.
  for (const TestModel& m : test_models()) {
    CAPTURE(m.name);
    const ModelConfig& c = m.config;
    const ModelWeights base = random_model_weights(c, 13, 0.15, true);
    const LoraSpec spec = spec_for({"all-linear"});
    PolicyModel adapted(c, base, at::kFloat);
    adapted.add_adapters(spec);
    randomize_b(adapted, 14);
    const ModelWeights adapters = as_weights(adapted.adapter_tensors());
    const ModelWeights merged = adapted.to_weights();
    std::mt19937_64 rng(15);
    const std::vector<int32_t> tokens = random_tokens(rng, 21, c.vocab_size);
    at::Tensor want;
    {
      c10::NoGradGuard no_grad;
      want = adapted.forward(packed_layout({tokens}, 21)).reshape({-1}).to(at::kDouble);
    }
    const double bound = 2 * logit_tolerance(c, merged, 21);
    EngineOptions options;
    options.kv_cache_bytes = 8 << 20;
    for (const int split : {1, 2}) {
      CAPTURE(split);
      options.tensor_parallel = split;
      std::unique_ptr<ModelBackend> engine = make_model_backend(c, base, options);
      engine->add_adapters(spec);
      const std::vector<float> before = prefill_logits(*engine, tokens);  // zero adapters: the base model
      engine->update_weights(adapters);
      const std::vector<float> got = prefill_logits(*engine, tokens);
      REQUIRE(static_cast<int64_t>(got.size()) == want.numel());
      double worst = 0, moved = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double d = std::abs(got[i] - want[static_cast<int64_t>(i)].item<double>());
        worst = std::isnan(d) ? INFINITY : std::max(worst, d);
        moved = std::max(moved, std::abs(static_cast<double>(got[i]) - before[i]));
      }
      CHECK(worst <= bound);
      CHECK(moved > 1e-3);  // the adapters arrived and matter
      // A tensor the engine does not have is refused, naming it, before anything changes.
      CHECK_THROWS_WITH_AS(engine->update_weights(ModelWeights({{"model.layers.0.mlp.up_proj.lora_C.weight", {1}, {0}}})),
                           doctest::Contains("lora_C"), Error);
    }
    // The merged fallback: the same adapters through MergedAdapters into a plain backend.
    options.tensor_parallel = 1;
    std::unique_ptr<ModelBackend> plain = make_model_backend(c, base, options);
    MergedAdapters merging(c, spec, base);
    plain->update_weights(merging.merge(adapters));
    const std::vector<float> got = prefill_logits(*plain, tokens);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = std::abs(got[i] - want[static_cast<int64_t>(i)].item<double>());
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
    CHECK(worst <= bound);
  }
}

TEST_CASE("target modules: all-linear is every projection; a name that is none is refused") {
  CHECK(lora_modules({"all-linear"}).size() == 7);
  CHECK(lora_modules({"v_proj", "q_proj"}) == std::vector<std::string>{"q_proj", "v_proj"});  // layer order
  CHECK_THROWS_WITH_AS(lora_modules({"q_proj", "qkv_proj"}), doctest::Contains("\"qkv_proj\" is not a projection"),
                       Error);
  CHECK(lora_module_path(3, "down_proj") == "model.layers.3.mlp.down_proj");
  CHECK(lora_module_path(0, "k_proj") == "model.layers.0.self_attn.k_proj");
}

TEST_CASE("an adapted model computes its merged model; with adapters off, its base model exactly") {
  for (const TestModel& m : test_models()) {
    CAPTURE(m.name);
    const ModelConfig& c = m.config;
    const ModelWeights weights = random_model_weights(c, 3, 0.15, true);
    std::mt19937_64 rng(4);
    const TokenLayout layout = packed_layout({random_tokens(rng, 9, c.vocab_size), random_tokens(rng, 6, c.vocab_size)}, 16);
    PolicyModel adapted(c, weights, at::kFloat);
    adapted.add_adapters(spec_for({"all-linear"}));
    for (const auto& [name, p] : adapted.named_parameters()) CHECK_FALSE(p.requires_grad());  // frozen
    c10::NoGradGuard no_grad;
    const at::Tensor base_logits = PolicyModel(c, weights, at::kFloat).forward(layout);
    CHECK(max_abs_diff(adapted.forward(layout), base_logits) == 0.0);  // B = 0: exactly the base
    randomize_b(adapted, 5);
    const at::Tensor adapted_logits = adapted.forward(layout);
    CHECK(max_abs_diff(adapted_logits, base_logits) > 1e-3);  // the adapters matter
    // The merged model's forward: the same products, W·x + s·B·(A·x) summed in another order.
    const ModelWeights merged = adapted.to_weights();
    const at::Tensor merged_logits = PolicyModel(c, merged, at::kFloat).forward(layout);
    CHECK(max_abs_diff(adapted_logits, merged_logits) <= 2 * logit_tolerance(c, merged, layout.input_ids.size(1)));
    adapted.set_adapters_enabled(false);
    CHECK(max_abs_diff(adapted.forward(layout), base_logits) == 0.0);
  }
}

TEST_CASE("a bf16-stored base holds its projections in 2 bytes and computes as the base rounded to bf16") {
  // learner.lora.base_dtype bf16: the projections are rounded once; linear() widens them to
  // the compute dtype exactly, so the model is the float32 one on rounded weights, bit for bit
  // (the rollout engines round their base with round_projections_to_bf16 alike).
  for (const TestModel& m : test_models()) {
    CAPTURE(m.name);
    const ModelConfig& c = m.config;
    const ModelWeights weights = random_model_weights(c, 21, 0.15, true);
    ModelWeights rounded = weights;
    round_projections_to_bf16(rounded);
    LoraSpec stored_bf16 = spec_for({"q_proj", "down_proj"});
    stored_bf16.base_bf16 = true;
    PolicyModel half(c, weights, at::kFloat);
    half.add_adapters(stored_bf16);
    PolicyModel exact(c, rounded, at::kFloat);
    exact.add_adapters(spec_for({"q_proj", "down_proj"}));
    randomize_b(half, 22);
    randomize_b(exact, 22);
    int64_t bytes = 0, float_bytes = 0;
    for (const auto& [name, p] : half.named_parameters()) {
      CAPTURE(name);
      CHECK((p.scalar_type() == (is_layer_projection_weight(name) ? at::kBFloat16 : at::kFloat)));
      bytes += p.numel() * static_cast<int64_t>(p.element_size());
      float_bytes += p.numel() * 4;
    }
    CHECK(bytes < float_bytes);
    std::mt19937_64 rng(23);
    const TokenLayout layout = packed_layout({random_tokens(rng, 9, c.vocab_size)}, 9);
    c10::NoGradGuard no_grad;
    CHECK(max_abs_diff(half.forward(layout), exact.forward(layout)) == 0.0);
    // The merged export is that base plus the adapters: the rounded weights where B·A is 0.
    CHECK(half.to_weights().get("model.layers.0.self_attn.k_proj.weight").data ==
          rounded.get("model.layers.0.self_attn.k_proj.weight").data);
  }
}

TEST_CASE("the adapters' gradients are the chain rule through the merged weight") {
  const ModelConfig c = test_models()[1].config;  // attention biases, MHA
  const ModelWeights weights = random_model_weights(c, 6, 0.15, true);
  std::mt19937_64 rng(7);
  const TokenLayout layout = packed_layout({random_tokens(rng, 10, c.vocab_size), random_tokens(rng, 7, c.vocab_size)}, 17);
  PolicyModel adapted(c, weights, at::kFloat);
  const LoraSpec spec = spec_for({"q_proj", "v_proj", "o_proj", "down_proj"}, 3, 6);
  adapted.add_adapters(spec);
  randomize_b(adapted, 8);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(9);
  const at::Tensor direction = at::randn({layout.input_ids.size(0), layout.input_ids.size(1), c.vocab_size}, generator);
  (adapted.forward(layout) * direction).sum().backward();
  // The merged model's gradient dW of each targeted weight, then dA = s·Bᵀ·dW, dB = s·dW·Aᵀ.
  PolicyModel merged(c, adapted.to_weights(), at::kFloat);
  (merged.forward(layout) * direction).sum().backward();
  std::map<std::string, at::Tensor> merged_grads;
  for (const auto& [name, p] : merged.named_parameters()) merged_grads[name] = p.grad().to(at::kDouble);
  // A gradient entry sums over the positions and along the forward's path; the two
  // computations reorder those float32 sums: relative error within 2·(path + positions)·u
  // of each (forward_tolerance.h's model), twice that between them.
  const double bound = 4 * (forward_path_length(c, layout.input_ids.size(1)) + layout.input_ids.numel()) * kUnitRoundoff;
  const auto& adapters = adapted.adapter_parameters();
  REQUIRE(adapters.size() == 2 * spec.modules.size() * static_cast<size_t>(c.num_hidden_layers));
  for (size_t i = 0; i < adapters.size(); i += 2) {
    const std::string module = adapters[i].first.substr(0, adapters[i].first.size() - std::string(".lora_A.weight").size());
    CAPTURE(module);
    const at::Tensor a = adapters[i].second.detach().to(at::kDouble), b = adapters[i + 1].second.detach().to(at::kDouble);
    const at::Tensor dw = merged_grads.at(module + ".weight");
    const at::Tensor want_a = at::mm(b.t(), dw).mul(spec.scale()), want_b = at::mm(dw, a.t()).mul(spec.scale());
    CHECK(relative_l2(adapters[i].second.grad(), want_a) <= bound);
    CHECK(relative_l2(adapters[i + 1].second.grad(), want_b) <= bound);
  }
}

TEST_CASE("a LoRA trainer trains only its adapters, keeps the base as the KL reference, and checkpoints them") {
  TrainerScenario s = trainer_scenario(19, "ddp");
  s.options.learner.lora = {4, 8.0, {"all-linear"}, 0.0};
  s.options.learner.optimizer.lr = 1e-2;
  s.options.base_model = "builtin:test";
  TempDir dir;
  auto collectives = Collectives::create({});
  Trainer trainer(s.config, s.weights, s.options, *collectives);
  // Before any step the adapted model is the base one: its weights, and log-probs equal to the reference's.
  CHECK(max_weight_diff(trainer.weights(), s.weights) == 0.0);
  trainer.train(s.mini_batches);
  const ModelWeights trained = trainer.weights();
  CHECK(max_weight_diff(trained, s.weights) > 1e-4);  // it learned
  // What LoRA cannot change stays the base's exactly: the embeddings, norms and LM head.
  for (const char* name : {"model.embed_tokens.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight"}) {
    CAPTURE(name);
    CHECK(trained.get(name).data == s.weights.get(name).data);
  }
  // The KL reference is the base model: its log-probs are a fresh base model's.
  const std::vector<TrainingSample>& probes = s.mini_batches[0];
  const std::vector<std::vector<float>> reference = trainer.reference_logprobs(probes);
  {
    Trainer base(s.config, s.weights, [&] {
      TrainerOptions o = s.options;
      o.learner.lora = {};
      return o;
    }(), *collectives);
    const std::vector<std::vector<float>> fresh = base.response_logprobs(probes);
    for (size_t i = 0; i < probes.size(); ++i) CHECK(reference[i] == fresh[i]);
  }
  // Checkpoint: the merged model, and the adapters in PEFT's format; loaded back exactly.
  trainer.save_checkpoint(dir.path() + "/ckpt");
  const nlohmann::json peft = nlohmann::json::parse(read_file(dir.path() + "/ckpt/adapter/adapter_config.json").value_or(""));
  CHECK(peft.at("peft_type") == "LORA");
  CHECK(peft.at("r") == 4);
  CHECK(peft.at("lora_alpha") == 8.0);
  CHECK(peft.at("target_modules").size() == 7);
  CHECK(peft.at("base_model_name_or_path") == "builtin:test");
  auto adapter_file = SafetensorsFile::open(dir.path() + "/ckpt/adapter/adapter_model.safetensors");
  const TensorView& q_a = adapter_file->get("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  CHECK(q_a.shape == std::vector<int64_t>{4, s.config.hidden_size});
  const TensorView& down_b = adapter_file->get("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  CHECK(down_b.shape == std::vector<int64_t>{s.config.hidden_size, 4});
  CHECK(max_weight_diff(load_model_weights(dir.path() + "/ckpt", s.config), trained) == 0.0);
  Trainer resumed(s.config, s.weights, s.options, *collectives);
  resumed.load_checkpoint(dir.path() + "/ckpt");
  CHECK(max_weight_diff(resumed.weights(), trained) == 0.0);
  // Both go on alike: the optimizer's moments came back too.
  trainer.train({s.mini_batches[0]});
  resumed.train({s.mini_batches[0]});
  CHECK(max_weight_diff(resumed.weights(), trainer.weights()) == 0.0);
  // A checkpoint without adapters cannot start a LoRA run silently from fresh adapters.
  Trainer full(s.config, s.weights, [&] {
    TrainerOptions o = s.options;
    o.learner.lora = {};
    return o;
  }(), *collectives);
  full.save_checkpoint(dir.path() + "/full");
  CHECK_THROWS_WITH_AS(resumed.load_checkpoint(dir.path() + "/full"), doctest::Contains("has no LoRA adapters"), Error);
}
