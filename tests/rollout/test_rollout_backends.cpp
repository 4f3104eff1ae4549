// The rollout backends' shared conformance suite (rollout/model_backend.h). Every backend
// is checked the same way:
// - its forward against the independent float64 forward (tests/support/reference_model.h);
// - steps of different shapes (incremental decoding, decode and prefill sequences mixed in
//   one step, scattered blocks) against one full prefill of the same tokens;
// - KV block copies (prefix sharing's copy-on-write): decoding on copies of a prefill's
//   blocks against one full prefill;
// - the engine's greedy tokens and log-probs against the float64 reference;
// - continuous batching, chunked prefill and preemption against each request run alone;
// - weight updates: full, partial (inside the CUDA backend's stacked q|k|v and gate|up
//   buffers), tied embeddings, and bad updates that must change nothing.
// Built three times. test_rollout_backends (suite unit) runs "cpu". With
// TANDEM_ROLLOUT_BACKENDS_GPU, test_rollout_backends_gpu (suite gpu) runs "cuda" in fp32 and
// bf16, compares it with the CPU backend, and exits 77 with the reason when no CUDA device
// is usable; test_rollout_backends_cudasim (tools/cudasim/meson.build) runs those cuda
// cases on the simulated runtime. The seed is printed; TANDEM_TEST_SEED=<seed> replays a run.
// The backends and helpers are in backends_under_test.h; the cases only one build runs are
// in test_rollout_backends_cpu_build.cpp (unit) and test_rollout_backends_gpu_build.cpp
// (gpu and cudasim, with their main).
#include "tests/rollout/backends_under_test.h"

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("backend forward matches the float64 reference for every architecture feature") {
  auto rng = kernel_test_rng(1);
  for (const BackendUnderTest& b : backends_under_test()) {
    for (const TestModel& m : test_models()) {
      INFO(b.name << ": " << m.name);
      ModelWeights weights = weights_for(b, m.config, rng(), 0.15);
      std::unique_ptr<ModelBackend> backend = make_model_backend(m.config, weights, options_for(b, 16));
      std::vector<int32_t> tokens = prompt_tokens(rng, 70, m.config.vocab_size);
      std::vector<float> logits = prefill_logits(*backend, tokens, scattered_blocks(3, 5));
      check_close(b.name, to_double(logits), flatten(reference_logits(m.config, weights, tokens)),
                  {logit_bound(b, m.config, weights, 70, 1), 0});
    }
  }
}

TEST_CASE("a sequence classifier's head: each logit row is its labels' scores (reward-model workers)") {
  auto rng = kernel_test_rng(9);
  for (const BackendUnderTest& b : backends_under_test()) {
    for (TestModel m : test_models()) {
      if (b.tensor_parallel > 1) {  // a classifier is never split (reward-model workers run whole)
        m.config.num_labels = 1;
        EngineOptions split = options_for(b);
        CHECK_THROWS_WITH(RolloutEngine(m.config, random_model_weights(m.config, 1), split),
                          doctest::Contains("this model is a sequence classifier"));
        continue;
      }
      for (const int64_t labels : {1, 3}) {
        INFO(b.name << ": " << m.name << ", " << labels << " labels");
        m.config.num_labels = labels;  // score.weight replaces lm_head, tied model or not
        ModelWeights weights = weights_for(b, m.config, rng(), 0.15);
        REQUIRE(weights.contains("score.weight"));
        CHECK_FALSE(weights.contains("lm_head.weight"));
        std::unique_ptr<ModelBackend> backend = make_model_backend(m.config, weights, options_for(b, 16));
        // Two sequences in one step, only their last tokens' rows: as a scoring pass asks.
        const std::vector<int32_t> first = prompt_tokens(rng, 23, m.config.vocab_size);
        const std::vector<int32_t> second = prompt_tokens(rng, 41, m.config.vocab_size);
        const std::vector<int32_t> first_table = scattered_blocks(0, 2), second_table = scattered_blocks(2, 3);
        ForwardBatch batch;
        batch.tokens = first;
        batch.tokens.insert(batch.tokens.end(), second.begin(), second.end());
        batch.sequences.push_back({0, 23, 0, first_table.data()});
        batch.sequences.push_back({23, 64, 0, second_table.data()});
        batch.logit_rows = {22, 63};
        std::vector<float> scores;
        backend->forward(batch, scores);
        REQUIRE(scores.size() == static_cast<size_t>(2 * labels));
        std::vector<double> want = reference_logits(m.config, weights, first).back();
        const std::vector<double> second_want = reference_logits(m.config, weights, second).back();
        want.insert(want.end(), second_want.begin(), second_want.end());
        // One forward against the exact float64 one: forward_tolerance.h's logit bound, u (and
        // bf16's storage roundoff) times the summed lengths of the float32 sums on the path to
        // a 64-token position, times the head row's norm and the final norm's scale: from the
        // model's sizes and weights, not from any CPU's measurement, so it holds on any CPU.
        check_close(b.name, to_double(scores), want, {logit_bound(b, m.config, weights, 64, 1), 0});
      }
    }
  }
}

TEST_CASE("incremental and mixed decode/prefill steps equal one full prefill") {
  auto rng = kernel_test_rng(2);
  for (const BackendUnderTest& b : backends_under_test()) {
    for (const TestModel& m : test_models()) {
      INFO(b.name << ": " << m.name);
      const int64_t vocab = m.config.vocab_size;
      ModelWeights weights = weights_for(b, m.config, rng(), 0.15);
      std::unique_ptr<ModelBackend> backend = make_model_backend(m.config, weights, options_for(b, 3));
      REQUIRE(backend->kv_blocks() >= 64);

      // One sequence: prefill 5 tokens, then one at a time through 3-slot blocks.
      std::vector<int32_t> tokens = prompt_tokens(rng, 23, vocab);
      std::vector<float> full = prefill_logits(*backend, tokens, scattered_blocks(40, 8));
      std::vector<int32_t> table = {9, 2, 14, 0, 7, 11, 3, 5};
      std::vector<float> incremental, logits;
      for (int64_t begin = 0; begin < 23;) {
        const int64_t end = begin == 0 ? 5 : begin + 1;
        ForwardBatch batch;
        batch.tokens.assign(tokens.begin() + begin, tokens.begin() + end);
        batch.sequences.push_back({0, end - begin, begin, table.data()});
        for (int64_t t = 0; t < end - begin; ++t) batch.logit_rows.push_back(t);
        backend->forward(batch, logits);
        incremental.insert(incremental.end(), logits.begin(), logits.end());
        begin = end;
      }
      check_close("incremental decoding", to_double(incremental), to_double(full),
                  {logit_bound(b, m.config, weights, 23), 0});

      // Three sequences whose chunks share steps in every combination: decodes, prefill
      // chunks and one-token prefill chunks, listed out of order, logit rows shuffled.
      std::vector<int32_t> a = prompt_tokens(rng, 14, vocab), bb = prompt_tokens(rng, 8, vocab),
                           c = prompt_tokens(rng, 9, vocab);
      std::vector<int32_t> table_a = {17, 12, 15, 10, 16}, table_b = {20, 13, 21}, table_c = {11, 22, 14, 18};
      const std::vector<float> full_a = prefill_logits(*backend, a, scattered_blocks(40, 5));
      const std::vector<float> full_b = prefill_logits(*backend, bb, scattered_blocks(50, 3));
      const std::vector<float> full_c = prefill_logits(*backend, c, scattered_blocks(56, 4));
      struct Chunk {
        const std::vector<int32_t>* seq;
        const std::vector<int32_t>* table;
        const std::vector<float>* full;
        int64_t begin, end;
      };
      const std::vector<std::vector<Chunk>> steps = {
          {{&a, &table_a, &full_a, 0, 12}, {&c, &table_c, &full_c, 0, 5}},
          {{&bb, &table_b, &full_b, 0, 7}, {&a, &table_a, &full_a, 12, 13}, {&c, &table_c, &full_c, 5, 6}},
          {{&a, &table_a, &full_a, 13, 14}, {&c, &table_c, &full_c, 6, 9}, {&bb, &table_b, &full_b, 7, 8}},
      };
      std::vector<double> got, want;
      for (const std::vector<Chunk>& step : steps) {
        ForwardBatch batch;
        std::vector<std::pair<const Chunk*, int64_t>> rows;  // (chunk, position) of each batch token
        for (const Chunk& chunk : step) {
          const int64_t first = static_cast<int64_t>(batch.tokens.size());
          batch.tokens.insert(batch.tokens.end(), chunk.seq->begin() + chunk.begin, chunk.seq->begin() + chunk.end);
          batch.sequences.push_back({first, static_cast<int64_t>(batch.tokens.size()), chunk.begin, chunk.table->data()});
          for (int64_t p = chunk.begin; p < chunk.end; ++p) rows.push_back({&chunk, p});
        }
        for (size_t i = 0; i < rows.size(); ++i) batch.logit_rows.push_back(static_cast<int64_t>(rows.size() - 1 - i));
        backend->forward(batch, logits);
        for (size_t r = 0; r < batch.logit_rows.size(); ++r) {
          const auto& [chunk, position] = rows[batch.logit_rows[r]];
          got.insert(got.end(), logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
          want.insert(want.end(), chunk->full->begin() + position * vocab, chunk->full->begin() + (position + 1) * vocab);
        }
      }
      check_close("mixed steps", got, want, {logit_bound(b, m.config, weights, 23), 0});
    }
  }
}

TEST_CASE("copied KV blocks hold what their sources held (prefix sharing's copy-on-write)") {
  auto rng = kernel_test_rng(8);
  for (const BackendUnderTest& b : backends_under_test()) {
    const TestModel m = test_models()[3];
    INFO(b.name << ": " << m.name);
    const int64_t vocab = m.config.vocab_size;
    const ModelWeights weights = weights_for(b, m.config, rng(), 0.15);
    std::unique_ptr<ModelBackend> backend = make_model_backend(m.config, weights, options_for(b, 3));
    REQUIRE(backend->kv_blocks() >= 64);
    // 11 tokens: the reference, one prefill of all of them into other blocks.
    const std::vector<int32_t> tokens = prompt_tokens(rng, 11, vocab);
    const std::vector<float> full = prefill_logits(*backend, tokens, scattered_blocks(40, 4));
    // The first 10 into blocks {5, 1, 8, 3}; those copied to {20, 31, 22, 27} (the last
    // one, partly filled, as copy-on-write does); then token 10 on the copies alone. The
    // sources are overwritten after copying: the copies must not depend on them.
    const std::vector<int32_t> source = {5, 1, 8, 3}, copy = {20, 31, 22, 27};
    prefill_logits(*backend, std::vector<int32_t>(tokens.begin(), tokens.begin() + 10), source);
    std::vector<KvBlockCopy> copies;
    for (size_t i = 0; i < source.size(); ++i) copies.push_back({source[i], copy[i]});
    backend->copy_kv_blocks(copies);
    prefill_logits(*backend, prompt_tokens(rng, 12, vocab), source);
    ForwardBatch batch;
    batch.tokens = {tokens[10]};
    batch.sequences.push_back({0, 1, 10, copy.data()});
    batch.logit_rows = {0};
    std::vector<float> logits;
    backend->forward(batch, logits);
    check_close("decoding on copied blocks", to_double(logits),
                std::vector<double>(full.begin() + 10 * vocab, full.begin() + 11 * vocab),
                {logit_bound(b, m.config, weights, 12), 0});
  }
}

TEST_CASE("engine greedy tokens and log-probs follow the float64 reference") {
  auto rng = kernel_test_rng(3);
  for (const BackendUnderTest& b : backends_under_test()) {
    for (const TestModel& m : test_models()) {
      ModelWeights weights = weights_for(b, m.config, rng(), 0.15);
      RolloutEngine engine(m.config, weights, options_for(b));
      for (double temperature : {0.0, 0.7}) {
        INFO(b.name << ": " << m.name << ", temperature " << temperature);
        std::vector<GenerationRequest> requests;
        for (uint64_t id = 0; id < 3; ++id) {
          GenerationRequest r;
          r.id = id;
          r.prompt = prompt_tokens(rng, 3 + 6 * id, m.config.vocab_size);
          r.n = 2;
          r.max_new_tokens = 12;
          r.sampling.temperature = temperature;
          r.sampling.top_p = id == 2 && temperature > 0 ? 0.9 : 1.0;  // truncation changes the draw, not `logprobs`
          r.seed = rng();
          requests.push_back(r);
        }
        for (const GeneratedSample& s : engine.generate(requests)) {
          std::vector<int32_t> sequence = requests[s.request_id].prompt;
          const size_t prompt_length = sequence.size();
          sequence.insert(sequence.end(), s.tokens.begin(), s.tokens.end());
          const Matrix ref = reference_logits(m.config, weights, sequence);
          for (size_t t = 0; t < s.tokens.size(); ++t) {
            const std::vector<double>& row = ref[prompt_length + t - 1];
            const std::vector<double> lp = reference_log_softmax(row, temperature > 0 ? temperature : 1.0);
            INFO("request " << s.request_id << " sample " << s.sample_index << " token " << t);
            const double bound = logprob_bound(b, m.config, weights, 40, temperature, 1);
            CHECK(std::abs(lp[s.tokens[t]] - s.logprobs[t]) <= bound);
            if (temperature == 0) {  // the argmax, or a near-tie with it: each logit within the bound
              CHECK(*std::max_element(row.begin(), row.end()) - row[s.tokens[t]] <=
                    logit_bound(b, m.config, weights, 40));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("continuous batching, chunked prefill and preemption give each request's solo samples") {
  auto rng = kernel_test_rng(4);
  const TestModel m = test_models()[3];
  for (const BackendUnderTest& b : backends_under_test()) {
    ModelWeights weights = weights_for(b, m.config, rng(), 0.3);
    // Prompts and responses within 64 tokens, temperatures 0.8 and up (greedy: 1).
    const double agreement = logprob_bound(b, m.config, weights, 64, 0.8);
    std::vector<GenerationRequest> requests;
    for (uint64_t id = 0; id < 12; ++id) {
      GenerationRequest r;
      r.id = 100 + id;
      r.prompt = prompt_tokens(rng, 1 + static_cast<int64_t>(rng() % 30), m.config.vocab_size);
      r.n = 1 + static_cast<int64_t>(id % 3);
      r.max_new_tokens = 4 + static_cast<int64_t>(rng() % 20);
      r.seed = rng();
      if (b.batch_invariant) {
        r.sampling.temperature = id % 4 == 0 ? 0.0 : 0.8;
        r.sampling.top_k = id % 5 == 1 ? 10 : 0;
        r.sampling.top_p = id % 3 == 2 ? 0.85 : 1.0;
      } else {
        r.sampling.temperature = 0.0;  // near-ties are recognisable only for greedy choices
      }
      requests.push_back(r);
    }
    std::vector<GeneratedSample> solo;
    {
      RolloutEngine engine(m.config, weights, options_for(b));
      for (const GenerationRequest& r : requests) {
        for (GeneratedSample& s : engine.generate({r})) solo.push_back(std::move(s));
      }
    }
    {
      RolloutEngine engine(m.config, weights, options_for(b));
      check_same_samples(b, engine.generate(requests), solo, agreement, "all at once");
      CHECK(engine.stats().preemptions == 0);
    }
    {
      EngineOptions tight = options_for(b);
      tight.max_batch_tokens = 7;  // prompts prefill in chunks over several steps
      tight.max_running = 5;
      RolloutEngine engine(m.config, weights, tight);
      check_same_samples(b, engine.generate(requests), solo, agreement, "chunked prefill, at most 5 running");
    }
    {
      EngineOptions starved = options_for(b);
      // Split, a block costs every rank's KV heads (a replicated head counts on each rank).
      const int64_t kv_heads = local_sizes(m.config, {b.tensor_parallel, 0}).kv_heads * b.tensor_parallel;
      KvCacheShape shape{m.config.num_hidden_layers, kv_heads, m.config.head_dim, 4, 0};
      starved.kv_cache_bytes = 14 * shape.bytes_per_block();  // cpu: 56 token slots for ~25 samples
      starved.max_kv_blocks = 14;                              // cuda: the same
      RolloutEngine engine(m.config, weights, starved);
      REQUIRE(engine.stats().kv_blocks_total == 14);
      check_same_samples(b, engine.generate(requests), solo, agreement, "KV cache too small for everyone: preemption");
      CHECK(engine.stats().preemptions > 0);
      CHECK(engine.stats().kv_blocks_peak <= 14);
    }
  }
}

TEST_CASE("steps of many large logit rows, sampled over threads, give each request's solo samples") {
  auto rng = kernel_test_rng(7);
  TestModel m = test_models()[0];
  m.config.vocab_size = 4096;  // 64 rows x 4096 logits: rollout/engine.cpp samples them over a pool
  for (const BackendUnderTest& b : backends_under_test()) {
    ModelWeights weights = weights_for(b, m.config, rng(), 0.3);
    // Prompts and responses within 64 tokens, temperatures 0.8 and up (greedy: 1).
    const double agreement = logprob_bound(b, m.config, weights, 64, 0.8);
    std::vector<GenerationRequest> requests;
    for (uint64_t id = 0; id < 64; ++id) {
      GenerationRequest r;
      r.id = id;
      r.prompt = prompt_tokens(rng, 1 + static_cast<int64_t>(rng() % 12), m.config.vocab_size);
      r.max_new_tokens = 5;
      r.ignore_eos = true;
      r.seed = rng();
      r.sampling.temperature = b.batch_invariant ? 0.9 : 0.0;
      if (b.batch_invariant) r.sampling.top_k = id % 3 == 0 ? 50 : 0;
      requests.push_back(r);
    }
    std::vector<GeneratedSample> solo;
    RolloutEngine engine(m.config, weights, options_for(b));
    for (const GenerationRequest& r : requests) solo.push_back(engine.generate({r})[0]);
    check_same_samples(b, engine.generate(requests), solo, agreement, "64 requests at once");
  }
}

TEST_CASE("weight updates: full, partial and tied take effect; bad ones change nothing") {
  auto rng = kernel_test_rng(5);
  const TestModel m = test_models()[2];  // q/k/v biases, tied embeddings
  for (const BackendUnderTest& b : backends_under_test()) {
    INFO(b.name);
    ModelWeights before = weights_for(b, m.config, rng(), 0.3);
    ModelWeights after = weights_for(b, m.config, rng(), 0.3);
    GenerationRequest r;
    r.prompt = prompt_tokens(rng, 6, m.config.vocab_size);
    r.max_new_tokens = 10;
    r.ignore_eos = true;
    r.seed = 1;
    r.sampling.temperature = 0.8;
    auto fresh = [&](const ModelWeights& w) { return RolloutEngine(m.config, w, options_for(b)).generate({r})[0]; };
    auto same = [](const GeneratedSample& x, const GeneratedSample& y) {
      return x.tokens == y.tokens && x.logprobs == y.logprobs;  // one backend, one step shape: deterministic
    };
    const GeneratedSample with_before = fresh(before), with_after = fresh(after);
    REQUIRE_FALSE(same(with_before, with_after));

    RolloutEngine engine(m.config, before, options_for(b));
    CHECK(same(engine.generate({r})[0], with_before));
    engine.update_weights(after, 1);
    CHECK(same(engine.generate({r})[0], with_after));

    // A few tensors, each inside a stacked buffer on cuda, and the tied embeddings.
    const std::vector<std::string> names = {"model.layers.1.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.bias",
                                            "model.layers.0.mlp.up_proj.weight", "model.embed_tokens.weight"};
    std::vector<WeightTensor> part, mixed = after.tensors();
    for (const std::string& name : names) part.push_back(before.get(name));
    for (WeightTensor& t : mixed) {
      if (std::find(names.begin(), names.end(), t.name) != names.end()) t = before.get(t.name);
    }
    engine.update_weights(ModelWeights(part), 2);
    const GeneratedSample partial = engine.generate({r})[0];
    CHECK(same(partial, fresh(ModelWeights(mixed))));
    CHECK_FALSE(same(partial, with_after));

    // A wrong shape or an unknown name anywhere: nothing changes.
    std::vector<WeightTensor> bad = before.tensors();
    bad.front().data.assign(bad.front().data.size(), 0.0f);
    bad.back().shape = {1, 1};
    bad.back().data = {0.0f};
    CHECK_THROWS_WITH_AS(engine.update_weights(ModelWeights(bad), 3), doctest::Contains("has shape [1, 1]"),
                         tandem::Error);
    std::vector<WeightTensor> unknown = {before.tensors().front(), {"model.layers.9.mlp.up_proj.weight", {1}, {0.0f}}};
    CHECK_THROWS_WITH_AS(engine.update_weights(ModelWeights(unknown), 3), doctest::Contains("unexpected tensor"),
                         tandem::Error);
    CHECK(engine.weight_version() == 2);
    CHECK(same(engine.generate({r})[0], partial));
  }
}

