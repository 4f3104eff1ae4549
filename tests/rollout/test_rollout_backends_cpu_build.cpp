// The rollout backend cases only the CPU build of the suite runs (test_rollout_backends,
// suite unit): bf16 weights against fp32 on rounded values, device names, and the CUDA
// backend's step planning (plain C++, tested everywhere).
#include "tests/rollout/backends_under_test.h"

using namespace tandem;
using namespace tandem::testing;


// On a CPU whose gemm_nt_bf16 rounds the rows as well (AVX512_BF16), within the bounds instead.
TEST_CASE("bf16 weights compute what fp32 computes on the rounded values") {
  auto rng = kernel_test_rng(6);
  for (const TestModel& m : test_models()) {
    INFO(m.name);
    const ModelWeights exact = random_model_weights(m.config, rng(), 0.3, true);
    // The matrices are rounded (projections, embedding, LM head); norms and biases stay float32.
    std::vector<WeightTensor> rounded = exact.tensors();
    for (WeightTensor& t : rounded) {
      if (t.shape.size() != 2) continue;
      for (float& x : t.data) x = bf16_to_float(float_to_bf16(x));
    }
    EngineOptions fp32 = options_for(kCpu, 16), bf16 = options_for(kCpuBf16Weights, 16);
    const std::vector<int32_t> tokens = prompt_tokens(rng, 40, m.config.vocab_size);
    std::unique_ptr<ModelBackend> backend = make_model_backend(m.config, exact, bf16);
    CHECK(backend->name() == "cpu, bf16 weights");
    const std::vector<float> from_bf16 = prefill_logits(*backend, tokens, scattered_blocks(3, 5));
    const std::vector<float> from_rounded =
        prefill_logits(*make_model_backend(m.config, ModelWeights(rounded), fp32), tokens, scattered_blocks(3, 5));
    const std::vector<float> from_exact = prefill_logits(*make_model_backend(m.config, exact, fp32), tokens, scattered_blocks(3, 5));
    REQUIRE(from_bf16.size() == from_rounded.size());
    if (!cpu::gemm_nt_bf16_rounds_rows()) {
      CHECK(std::memcmp(from_bf16.data(), from_rounded.data(), from_bf16.size() * sizeof(float)) == 0);
    } else {
      // The rows are rounded too (bfloat16 products). fp32 on the rounded weights is the
      // float32 chain without those roundings. How far the roundings move the logits comes
      // from a float64 run of the same chain with and without them (each product's input
      // row rounded to bf16, ReferenceRounding), not from the first-order error model:
      // that model assumes every block passes its input's error on with gain one, and
      // these random blocks amplify bf16's 2^-9 roundings by up to about 1.1 times its
      // estimate. The backend rounds float32 values, so some elements round the other way
      // than the float64 chain's and the difference propagates: its roundings are another
      // set of at most half an ulp each, whose effect is of the same size; twice the
      // float64 effect covers it. Each float32 chain adds its own sums' error.
      const ModelWeights rounded_weights(rounded);
      ReferenceRounding bf16_inputs;
      bf16_inputs.bf16_product_inputs = true;
      const Matrix with_rounding = reference_logits(m.config, rounded_weights, tokens, bf16_inputs);
      const Matrix without_rounding = reference_logits(m.config, rounded_weights, tokens);
      double rounding_effect = 0;
      for (size_t t = 0; t < with_rounding.size(); ++t)
        for (size_t v = 0; v < with_rounding[t].size(); ++v)
          rounding_effect = std::max(rounding_effect, std::abs(with_rounding[t][v] - without_rounding[t][v]));
      REQUIRE(rounding_effect > 0);
      const double bound = 2 * rounding_effect + 2 * logit_tolerance(m.config, rounded_weights, 40);
      check_close("bf16 products against fp32 on the rounded weights", to_double(from_bf16), to_double(from_rounded),
                  {bound, 0});
      CHECK(from_bf16 != from_rounded);  // the rows were rounded
    }
    CHECK(from_bf16 != from_exact);  // the rounding did happen
  }
  EngineOptions bad = options_for(kCpu);
  bad.cpu_weights = "int8";
  CHECK_THROWS_WITH_AS(make_model_backend(test_models()[0].config, random_model_weights(test_models()[0].config, 1), bad),
                       doctest::Contains("rollout.cpu_weights: \"int8\" (allowed: fp32, bf16)"), tandem::Error);
}

TEST_CASE("devices: cpu and cuda only; cuda says why it cannot run") {
  const TestModel m = test_models()[0];
  ModelWeights weights = random_model_weights(m.config, 1);
  EngineOptions options = options_for(kCpu);
  options.device = "auto";
  CHECK_THROWS_WITH_AS(make_model_backend(m.config, weights, options), doctest::Contains("device \"auto\""),
                       tandem::Error);
  options.device = "cuda";
  const CudaProbe probe = probe_cuda();
  if (!probe.built_with_cuda) {
    CHECK_THROWS_WITH_AS(make_model_backend(m.config, weights, options),
                         "rollout: device cuda, but tandem was built without CUDA", tandem::Error);
  } else if (!probe.usable) {
    CHECK_THROWS_WITH_AS(make_model_backend(m.config, weights, options), doctest::Contains(probe.detail.c_str()),
                         tandem::Error);
  }
}

TEST_CASE("the CUDA backend's step plan: device order, slots, block tables, logit rows, decode launches") {
  StepPlanLimits limits;
  limits.vocab_size = 97;
  limits.max_positions = 512;
  limits.block_size = 4;
  limits.num_blocks = 64;
  limits.max_tokens = 64;
  limits.max_seqs = 8;
  limits.meta_capacity = 1000;
  limits.decode_workspace_bytes = [](int64_t seqs, int64_t max_seq_len) { return seqs * max_seq_len; };
  limits.decode_workspace_capacity = 40;
  // Batch order: a prefill chunk, a decode, a first prefill, two decodes.
  const std::vector<int32_t> p1 = {10, 11}, d1 = {20, 21, 22}, p2 = {30}, d3 = {50};
  const std::vector<int32_t> d2 = {40, 41, 42, 43, 44, 45, 46, 47};
  ForwardBatch batch;
  batch.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  batch.sequences = {{0, 5, 3, p1.data()}, {5, 6, 9, d1.data()}, {6, 8, 0, p2.data()}, {8, 9, 30, d2.data()},
                     {9, 10, 0, d3.data()}};
  batch.logit_rows = {9, 4, 5, 7};
  StepPlan plan;
  plan_step(batch, limits, plan);
  auto slice = [&](int64_t at, int64_t count) {
    return std::vector<int32_t>(plan.meta.begin() + at, plan.meta.begin() + at + count);
  };
  CHECK(plan.tokens == 10);
  CHECK(plan.decode_seqs == 3);
  CHECK(plan.prefill_seqs == 2);
  // Device rows: d1, d2, d3, then p1's 5 tokens and p2's 2.
  CHECK(slice(plan.ids_at, 10) == std::vector<int32_t>{6, 9, 10, 1, 2, 3, 4, 5, 7, 8});
  CHECK(slice(plan.positions_at, 10) == std::vector<int32_t>{9, 30, 0, 3, 4, 5, 6, 7, 0, 1});
  CHECK(plan.slots == std::vector<int64_t>{22 * 4 + 1, 47 * 4 + 2, 50 * 4, 10 * 4 + 3, 11 * 4, 11 * 4 + 1, 11 * 4 + 2,
                                           11 * 4 + 3, 30 * 4, 30 * 4 + 1});
  CHECK(slice(plan.rows_at, 4) == std::vector<int32_t>{2, 7, 0, 9});
  CHECK(slice(plan.decode_lens_at, 3) == std::vector<int32_t>{10, 31, 1});
  CHECK(plan.decode_width == 8);
  CHECK(slice(plan.decode_tables_at, 24) == std::vector<int32_t>{20, 21, 22, -1, -1, -1, -1, -1, 40, 41, 42, 43, 44, 45,
                                                                  46, 47, 50, -1, -1, -1, -1, -1, -1, -1});
  // Workspace seqs * longest <= 40: 10 fits, 10 and 31 do not, 31 and 1 do not.
  REQUIRE(plan.decode_groups.size() == 3);
  CHECK(plan.decode_groups[0].count == 1);
  CHECK(plan.decode_groups[1].first == 1);
  CHECK(plan.decode_groups[1].max_seq_len == 31);
  CHECK(plan.decode_groups[2].max_seq_len == 1);
  CHECK(slice(plan.prefill_lens_at, 2) == std::vector<int32_t>{8, 2});
  CHECK(slice(plan.prefill_cu_at, 3) == std::vector<int32_t>{0, 5, 7});
  CHECK(plan.prefill_width == 2);
  CHECK(plan.prefill_max_q_len == 5);
  CHECK(plan.prefill_max_seq_len == 8);
  CHECK(slice(plan.prefill_tables_at, 4) == std::vector<int32_t>{10, 11, 30, -1});
  limits.decode_workspace_capacity = 1000;
  plan_step(batch, limits, plan);  // reusing the plan
  CHECK(plan.decode_groups.size() == 1);
  CHECK(plan.decode_groups[0].max_seq_len == 31);

  // A broken batch is an Error before anything reaches the device.
  ForwardBatch bad = batch;
  bad.tokens[3] = 97;
  CHECK_THROWS_WITH_AS(plan_step(bad, limits, plan), doctest::Contains("outside the vocabulary"), tandem::Error);
  const std::vector<int32_t> outside = {20, 21, 64};
  bad = batch;
  bad.sequences[1].block_table = outside.data();
  CHECK_THROWS_WITH_AS(plan_step(bad, limits, plan), doctest::Contains("outside the cache's 64 blocks"), tandem::Error);
  bad = batch;
  bad.sequences.pop_back();
  CHECK_THROWS_WITH_AS(plan_step(bad, limits, plan), doctest::Contains("cover 9 of its 10 tokens"), tandem::Error);
  limits.decode_workspace_capacity = 20;
  CHECK_THROWS_WITH_AS(plan_step(batch, limits, plan), doctest::Contains("needs 31 bytes"), tandem::Error);
}
