// The CPU rollout engine: its log-probs against the learner's training module,
// continuous batching and preemption against each request alone, stops, weight updates.
// (The forward against the float64 reference and KV-cache decoding against
// recomputation are in the backend suite, tests/rollout/test_rollout_backends.cpp.)
#include "actor/policy_torch.h"
#include "core/error.h"
#include "tests/support/forward_tolerance.h"
#include "tests/support/reference_model.h"
#include "rollout/cpu_model.h"
#include "rollout/engine.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <random>

using namespace tandem;
using namespace tandem::testing;

namespace {

// Prompt tokens: never the test models' eos id (vocab - 1).
std::vector<int32_t> prompt_tokens(std::mt19937_64& rng, int64_t length, int64_t vocab) {
  return random_tokens(rng, length, vocab - 1);
}

EngineOptions small_engine() {
  EngineOptions o;
  o.kv_cache_bytes = 8 << 20;
  o.block_size = 4;  // small blocks: sequences cross many block boundaries
  return o;
}

// The longest prompt plus response in these tests: the bound's attention sums are this long.
constexpr int64_t kLongestSequence = 64;

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::abs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace

TEST_CASE("rollout log-probs equal the learner module's for the same weights and tokens") {
  std::mt19937_64 rng(std::random_device{}());
  for (const TestModel& m : test_models()) {
    ModelWeights weights = random_model_weights(m.config, rng(), 0.15, true);
    PolicyModel learner(m.config, weights, at::kFloat);
    RolloutEngine engine(m.config, weights, small_engine());
    for (double temperature : {1.0, 0.6}) {
      std::vector<GenerationRequest> requests;
      for (uint64_t id = 0; id < 3; ++id) {
        GenerationRequest r;
        r.id = id;
        r.prompt = prompt_tokens(rng, 3 + 5 * id, m.config.vocab_size);
        r.n = 2;
        r.max_new_tokens = 12;
        r.sampling.temperature = temperature;
        r.sampling.top_p = id == 2 ? 0.9 : 1.0;  // truncation changes what is drawn, not `logprobs`
        r.seed = rng();
        requests.push_back(r);
      }
      double worst = 0;
      for (const GeneratedSample& s : engine.generate(requests)) {
        std::vector<int32_t> sequence = requests[s.request_id].prompt;
        const int64_t prompt_length = static_cast<int64_t>(sequence.size());
        sequence.insert(sequence.end(), s.tokens.begin(), s.tokens.end());
        TokenLayout layout = padded_layout({sequence});
        TokenLogProbs lp = token_logprobs(learner.forward(layout), layout, temperature);
        for (size_t t = 0; t < s.tokens.size(); ++t) {
          const double d = std::abs(lp.logprobs[0][prompt_length + t].item<float>() - s.logprobs[t]);
          worst = std::isnan(d) ? INFINITY : std::max(worst, d);
        }
      }
      INFO(m.name << " temperature " << temperature);
      CHECK(worst <= logprob_agreement(m.config, weights, kLongestSequence, temperature));
    }
  }
}

TEST_CASE("a padded vocabulary: ids past the tokenizer are never drawn, and log-probs still match the learner") {
  // Checkpoints pad embedding rows past the tokenizer (Qwen: 151936 rows, 151669 ids).
  // The padded rows here get large logits, so a sampler over every row draws them often.
  std::mt19937_64 rng(std::random_device{}());
  for (const TestModel& m : test_models()) {
    ModelConfig config = m.config;
    limit_to_tokenizer(config, 61, "test");  // ids 61..96 are padding
    REQUIRE(config.sampled_vocab() == 61);
    config.eos_token_ids = {60};
    ModelWeights weights = random_model_weights(config, rng(), 0.15, true);
    const std::string head = config.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    std::vector<float>& rows = weights.get_mutable(head).data;
    const size_t hidden = static_cast<size_t>(config.hidden_size);
    for (size_t i = 61 * hidden; i < rows.size(); ++i) rows[i] *= 20.0f;
    PolicyModel learner(config, weights, at::kFloat);
    RolloutEngine engine(config, weights, small_engine());
    for (double temperature : {1.0, 2.0}) {
      std::vector<GenerationRequest> requests;
      for (uint64_t id = 0; id < 4; ++id) {
        GenerationRequest r;
        r.id = id;
        r.prompt = prompt_tokens(rng, 2 + 3 * id, 60);
        r.n = 3;
        r.max_new_tokens = 16;
        r.sampling.temperature = temperature;
        r.sampling.top_k = id == 3 ? 5 : 0;
        r.seed = rng();
        requests.push_back(r);
      }
      double worst = 0;
      int64_t drawn = 0;
      for (const GeneratedSample& s : engine.generate(requests)) {
        for (int32_t t : s.tokens) REQUIRE(t < 61);
        drawn += static_cast<int64_t>(s.tokens.size());
        std::vector<int32_t> sequence = requests[s.request_id].prompt;
        const int64_t prompt_length = static_cast<int64_t>(sequence.size());
        sequence.insert(sequence.end(), s.tokens.begin(), s.tokens.end());
        TokenLayout layout = padded_layout({sequence});
        const at::Tensor logits = learner.forward(layout);
        REQUIRE(logits.size(2) == 61);
        TokenLogProbs lp = token_logprobs(logits, layout, temperature);
        for (size_t t = 0; t < s.tokens.size(); ++t) {
          const double d = std::abs(lp.logprobs[0][prompt_length + t].item<float>() - s.logprobs[t]);
          worst = std::isnan(d) ? INFINITY : std::max(worst, d);
        }
      }
      INFO(m.name << " temperature " << temperature);
      CHECK(drawn > 40);
      CHECK(worst <= logprob_agreement(config, weights, kLongestSequence, temperature));
    }
  }
  ModelConfig config = test_models()[0].config;
  CHECK_THROWS_WITH_AS(limit_to_tokenizer(config, 98, "dir"),
                       doctest::Contains("the tokenizer has 98 ids but config.json's vocab_size is 97"), Error);
  limit_to_tokenizer(config, 97, "dir");
  CHECK(config.sampled_vocab_size == 0);
}

TEST_CASE("continuous batching, chunked prefill and preemption give each request's solo tokens") {
  std::mt19937_64 rng(std::random_device{}());
  const TestModel m = test_models()[3];
  ModelWeights weights = random_model_weights(m.config, rng(), 0.3, true);
  std::vector<GenerationRequest> requests;
  for (uint64_t id = 0; id < 12; ++id) {
    GenerationRequest r;
    r.id = 100 + id;
    r.prompt = prompt_tokens(rng, 1 + static_cast<int64_t>(rng() % 30), m.config.vocab_size);
    r.n = 1 + static_cast<int64_t>(id % 3);
    r.max_new_tokens = 4 + static_cast<int64_t>(rng() % 20);
    r.sampling.temperature = id % 4 == 0 ? 0.0 : 0.8;
    r.sampling.top_k = id % 5 == 1 ? 10 : 0;
    r.sampling.top_p = id % 3 == 2 ? 0.85 : 1.0;
    r.seed = rng();
    requests.push_back(r);
  }
  std::vector<GeneratedSample> solo;
  {
    RolloutEngine engine(m.config, weights, small_engine());
    for (const GenerationRequest& r : requests) {
      for (GeneratedSample& s : engine.generate({r})) solo.push_back(std::move(s));
    }
  }
  // Sampling temperatures here are 0.8 or greedy: the bound at 0.8 covers both.
  const double agreement = logprob_agreement(m.config, weights, kLongestSequence, 0.8);
  auto compare = [&](const std::vector<GeneratedSample>& got, const std::string& how) {
    INFO(how);
    REQUIRE(got.size() == solo.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("request " << got[i].request_id << " sample " << got[i].sample_index);
      CHECK(got[i].request_id == solo[i].request_id);
      CHECK(got[i].sample_index == solo[i].sample_index);
      CHECK(got[i].tokens == solo[i].tokens);
      CHECK(max_abs_diff(got[i].logprobs, solo[i].logprobs) <= agreement);
      CHECK(got[i].finish_reason == solo[i].finish_reason);
    }
  };
  {
    RolloutEngine engine(m.config, weights, small_engine());
    // What a streaming rollout worker sends: every sample once, as it finishes, in steps
    // that come before generate() returns (called every step, finished samples or none).
    // max_new_tokens differ, so samples finish apart.
    std::vector<GeneratedSample> streamed;
    size_t calls = 0;
    compare(engine.generate(requests,
                            [&](const std::vector<GeneratedSample>& finished) {
                              ++calls;
                              streamed.insert(streamed.end(), finished.begin(), finished.end());
                            }),
            "all at once");
    CHECK(engine.stats().preemptions == 0);
    CHECK(calls > 1);
    std::sort(streamed.begin(), streamed.end(), [](const GeneratedSample& a, const GeneratedSample& b) {
      return a.request_id != b.request_id ? a.request_id < b.request_id : a.sample_index < b.sample_index;
    });
    compare(streamed, "streamed as they finished");
  }
  {
    EngineOptions tight = small_engine();
    tight.max_batch_tokens = 7;  // prompts prefill in chunks over several steps
    tight.max_running = 5;
    RolloutEngine engine(m.config, weights, tight);
    compare(engine.generate(requests), "chunked prefill, at most 5 running");
  }
  {
    EngineOptions starved = small_engine();
    KvCacheShape shape{m.config.num_hidden_layers, m.config.num_key_value_heads, m.config.head_dim, 4, 0};
    starved.kv_cache_bytes = 14 * shape.bytes_per_block();  // 56 token slots for ~25 samples
    RolloutEngine engine(m.config, weights, starved);
    compare(engine.generate(requests), "KV cache too small for everyone: preemption");
    CHECK(engine.stats().preemptions > 0);
    CHECK(engine.stats().kv_blocks_peak <= 14);
  }
  {
    // Requests arriving while others run.
    RolloutEngine engine(m.config, weights, small_engine());
    std::vector<GeneratedSample> got;
    size_t next = 0;
    while (next < requests.size() || engine.has_unfinished()) {
      if (next < requests.size()) engine.add_request(requests[next++]);
      for (GeneratedSample& s : engine.step()) got.push_back(std::move(s));
    }
    std::sort(got.begin(), got.end(), [](const GeneratedSample& a, const GeneratedSample& b) {
      return a.request_id != b.request_id ? a.request_id < b.request_id : a.sample_index < b.sample_index;
    });
    compare(got, "requests arriving during generation");
  }
}

TEST_CASE("seeds make sampling reproducible and distinct") {
  const TestModel m = test_models()[0];
  ModelWeights weights = random_model_weights(m.config, 21, 0.3, true);
  RolloutEngine engine(m.config, weights, small_engine());
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.n = 4;
  r.max_new_tokens = 24;
  r.ignore_eos = true;
  r.seed = 5;
  std::vector<GeneratedSample> a = engine.generate({r});
  std::vector<GeneratedSample> b = engine.generate({r});
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].tokens == b[i].tokens);
  CHECK(a[0].tokens != a[1].tokens);  // samples of one request differ
  r.seed = 6;
  CHECK(engine.generate({r})[0].tokens != a[0].tokens);
}

TEST_CASE("stop tokens, stop strings and length limits end samples with the right reason") {
  const TestModel m = test_models()[1];
  ModelWeights weights = random_model_weights(m.config, 3, 0.3, true);
  // Text of a completion: each token as a letter, so stop strings are easy to place.
  Detokenizer letters = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += static_cast<char>('a' + id % 26);
    return s;
  };
  RolloutEngine engine(m.config, weights, small_engine(), letters);
  GenerationRequest r;
  r.prompt = {4, 8, 15};
  r.max_new_tokens = 40;
  r.ignore_eos = true;
  r.seed = 9;
  GeneratedSample free_run = engine.generate({r})[0];
  REQUIRE(free_run.tokens.size() == 40);
  CHECK(free_run.finish_reason == FinishReason::finish_reason_length);

  r.stop_token_ids = {free_run.tokens[10]};
  GeneratedSample stopped = engine.generate({r})[0];
  CHECK(stopped.finish_reason == FinishReason::finish_reason_stop);
  CHECK(stopped.tokens.back() == free_run.tokens[10]);  // the stop token is kept
  CHECK(stopped.tokens.size() <= 11);

  r.stop_token_ids.clear();
  const std::string text = letters(free_run.tokens);
  r.stop_strings = {text.substr(20, 3)};
  GeneratedSample by_string = engine.generate({r})[0];
  CHECK(by_string.finish_reason == FinishReason::finish_reason_stop);
  CHECK(by_string.stop == text.substr(20, 3));
  CHECK(letters(by_string.tokens).find(text.substr(20, 3)) == letters(by_string.tokens).size() - 3);

  r.stop_strings.clear();
  r.ignore_eos = false;  // the model's eos id (96) stops it when drawn
  r.prompt = {96};
  r.sampling.temperature = 0;
  GeneratedSample greedy = engine.generate({r})[0];
  CHECK(std::count(greedy.tokens.begin(), greedy.tokens.end(), 96) <= 1);
}

TEST_CASE("bad requests are clear errors and queue nothing") {
  const TestModel m = test_models()[0];
  RolloutEngine engine(m.config, random_model_weights(m.config, 1), small_engine());
  GenerationRequest good;
  good.prompt = {1, 2};
  auto error_of = [&](GenerationRequest r) {
    try {
      engine.generate({good, r});
    } catch (const tandem::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  GenerationRequest r = good;
  r.id = 7;
  r.prompt = {};
  CHECK(error_of(r).find("request 7: the prompt is empty") != std::string::npos);
  r.prompt = {1, 97};
  CHECK(error_of(r).find("prompt token 1 is 97, outside the vocabulary") != std::string::npos);
  r.prompt = {1};
  r.sampling.top_p = 0;
  CHECK(error_of(r).find("top_p") != std::string::npos);
  r.sampling.top_p = 1;
  r.stop_strings = {"x"};
  CHECK(error_of(r).find("stop strings need a tokenizer") != std::string::npos);
  r.stop_strings.clear();
  r.max_new_tokens = 100000;
  // max_position_embeddings (512) caps a sample, and 512 positions fit in 8 MB: lower the budget.
  EngineOptions tiny = small_engine();
  tiny.kv_cache_bytes = 64 << 10;
  RolloutEngine small(m.config, random_model_weights(m.config, 1), tiny);
  CHECK_THROWS_WITH_AS(small.add_request(r), doctest::Contains("raise rollout.kv_cache_mb"), tandem::Error);
  CHECK_FALSE(engine.has_unfinished());
  CHECK_FALSE(small.has_unfinished());
}

TEST_CASE("weight updates load between steps, record the version and are checked first") {
  std::mt19937_64 rng(std::random_device{}());
  const TestModel m = test_models()[2];
  ModelWeights before = random_model_weights(m.config, rng(), 0.15, true);
  ModelWeights after = random_model_weights(m.config, rng(), 0.15, true);
  RolloutEngine engine(m.config, before, small_engine());
  GenerationRequest r;
  r.prompt = prompt_tokens(rng, 6, m.config.vocab_size);
  r.max_new_tokens = 8;
  r.seed = 1;
  CHECK(engine.generate({r})[0].weight_version == 0);

  engine.update_weights(after, 3);
  GeneratedSample s = engine.generate({r})[0];
  CHECK(s.weight_version == 3);
  CHECK(engine.weight_version() == 3);
  std::vector<int32_t> sequence = r.prompt;
  sequence.insert(sequence.end(), s.tokens.begin(), s.tokens.end());
  TokenLayout layout = padded_layout({sequence});
  TokenLogProbs lp = token_logprobs(PolicyModel(m.config, after, at::kFloat).forward(layout), layout);
  const double agreement = logprob_agreement(m.config, after, kLongestSequence);
  for (size_t t = 0; t < s.tokens.size(); ++t) CHECK(std::abs(lp.logprobs[0][6 + t].item<float>() - s.logprobs[t]) <= agreement);

  // A wrong shape anywhere: nothing changes.
  std::vector<WeightTensor> bad = after.tensors();
  bad.back().shape = {1, 1};
  bad.back().data = {0.0f};
  bad.front().data.assign(bad.front().data.size(), 0.0f);
  CHECK_THROWS_WITH_AS(engine.update_weights(ModelWeights(bad), 4), doctest::Contains("has shape [1, 1]"), tandem::Error);
  CHECK(engine.weight_version() == 3);
  CHECK(engine.generate({r})[0].tokens == s.tokens);
  CHECK_NOTHROW(engine.update_weights(after, 3));  // the same version again: a repeated delivery
  CHECK_THROWS_WITH_AS(engine.update_weights(after, 2), doctest::Contains("must not go back"), tandem::Error);
  CHECK_NOTHROW(engine.update_weights(after, 1, /*rewind=*/true));  // back to a checkpoint
  CHECK(engine.weight_version() == 1);
}

TEST_CASE("a weight update mid-generation: samples in flight go on with the new weights, each token's version "
          "recorded (partial rollouts)") {
  std::mt19937_64 rng(std::random_device{}());
  const TestModel m = test_models()[2];
  const ModelWeights before = random_model_weights(m.config, rng(), 0.15, true);
  const ModelWeights after = random_model_weights(m.config, rng(), 0.15, true);
  EngineOptions options = small_engine();
  options.max_batch_tokens = 7;  // prompts prefill over several steps: the update lands mid-prefill for some
  RolloutEngine engine(m.config, before, options);
  std::vector<GenerationRequest> requests;
  for (uint64_t id = 0; id < 3; ++id) {
    GenerationRequest r;
    r.id = id;
    r.prompt = prompt_tokens(rng, 4 + 3 * static_cast<int64_t>(id), m.config.vocab_size);
    r.n = 2;  // sharers of one prefill (rollout.prefix_sharing)
    r.max_new_tokens = 10;
    r.ignore_eos = true;
    r.seed = rng();
    requests.push_back(r);
  }
  int steps = 0;
  const int64_t preemptions = engine.stats().preemptions;
  const std::vector<GeneratedSample> samples = engine.generate(requests, [&](const std::vector<GeneratedSample>&) {
    if (++steps == 2) engine.update_weights(after, 1);
  });
  REQUIRE(samples.size() == 6);
  CHECK(engine.stats().preemptions == preemptions);  // a recomputation for new weights is not a preemption
  CHECK(engine.stats().kv_blocks_used == 0);
  const PolicyModel old_policy(m.config, before, at::kFloat), new_policy(m.config, after, at::kFloat);
  int continued = 0;
  for (const GeneratedSample& s : samples) {
    const GenerationRequest& r = requests[s.request_id];
    REQUIRE(s.tokens.size() == 10);
    REQUIRE(s.token_versions.size() == s.tokens.size());
    CHECK(s.weight_version == s.token_versions.front());
    CHECK(std::is_sorted(s.token_versions.begin(), s.token_versions.end()));
    CHECK(s.token_versions.back() == 1);  // every sample was still generating at the update
    continued += s.token_versions.front() == 0 ? 1 : 0;
    // Each token's log-prob is its own weights' over the whole prefix: after the update
    // the prefix's keys and values were recomputed with the new weights.
    std::vector<int32_t> sequence = r.prompt;
    sequence.insert(sequence.end(), s.tokens.begin(), s.tokens.end());
    const TokenLayout layout = padded_layout({sequence});
    const TokenLogProbs old_lp = token_logprobs(old_policy.forward(layout), layout);
    const TokenLogProbs new_lp = token_logprobs(new_policy.forward(layout), layout);
    const int64_t p = static_cast<int64_t>(r.prompt.size());
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      const TokenLogProbs& lp = s.token_versions[t] == 0 ? old_lp : new_lp;
      INFO("request ", s.request_id, " sample ", s.sample_index, " token ", t, " version ", s.token_versions[t]);
      const ModelWeights& used = s.token_versions[t] == 0 ? before : after;
      CHECK(std::abs(lp.logprobs[0][p + static_cast<int64_t>(t)].item<float>() - s.logprobs[t]) <=
            logprob_agreement(m.config, used, kLongestSequence));
    }
  }
  CHECK(continued > 0);  // some samples span both versions
  CHECK(continued < 6);  // and some started on the new weights (their prompt was not prefilled yet)
}
