// Multi-turn sessions in the rollout engine (rollout/engine.h, rollout/scheduler.h): a
// sample keeps its KV blocks between turns and prefills only the next message's tokens.
// - The scheduler alone: a parked sequence keeps its blocks, the pin cap evicts the
//   longest-parked first, a step short of blocks evicts pins before preempting anyone,
//   and a resumed sequence asks only for the blocks it lacks.
// - The CPU engine: every turn's tokens, log-probs and finish reasons are bit-identical to
//   a fresh request for the whole prefix (the counter-based sampling makes that the
//   definition of correct), with sessions kept, with nothing kept (cap 0: each turn is
//   recomputed), with a cache too small for everyone (evictions and preemptions), and
//   interleaved with single-turn requests; the prefill it saves; no block leaked; a weight
//   update drops the pins; bad continuations are clear errors that change nothing.
#include "tests/support/reference_model.h"
#include "core/error.h"
#include "rollout/engine.h"
#include "rollout/kv_cache.h"
#include "rollout/scheduler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("scheduler: a parked session keeps its blocks; pins are evicted oldest first, before any preemption") {
  BlockAllocator blocks(8);
  Scheduler scheduler(blocks, SchedulerOptions{4, 64, 16, false, 4});
  Sequence a, b;
  a.arrival = 0;
  a.tokens = {1, 2, 3, 4, 5, 6};  // 2 blocks
  a.prompt_length = 6;
  b.arrival = 1;
  b.tokens = {7, 8, 9, 10, 11, 12, 13, 14, 15};  // 3 blocks
  b.prompt_length = 9;
  scheduler.add(&a);
  scheduler.add(&b);
  ScheduledStep step = scheduler.plan();
  REQUIRE(step.chunks.size() == 2);
  a.cached = 6;
  b.cached = 9;
  a.tokens.push_back(20);  // each drew a token that ended its turn
  b.tokens.push_back(21);

  scheduler.park(&a);
  CHECK(a.block_table.size() == 2);
  CHECK(scheduler.pinned_blocks() == 2);
  CHECK(blocks.free_count() == 3);
  // b's 3 blocks pass the cap of 4 pinned: the longest-parked (a) gives its blocks up.
  scheduler.park(&b);
  CHECK(scheduler.evictions() == 1);
  CHECK(a.block_table.empty());
  CHECK(a.cached == 0);
  CHECK(scheduler.pinned_blocks() == 3);
  CHECK(blocks.free_count() == 5);
  CHECK(scheduler.idle());

  // b resumes with 4 new tokens: 14 tokens need 4 blocks, it holds 3, so one more; its
  // chunk runs only the drawn token and the new ones.
  b.tokens.insert(b.tokens.end(), {30, 31, 32, 33});
  b.prompt_length = 14;
  scheduler.resume(&b);
  CHECK(scheduler.pinned_blocks() == 3);  // evictable until admitted
  step = scheduler.plan();
  CHECK(scheduler.pinned_blocks() == 0);
  REQUIRE(step.chunks.size() == 1);
  CHECK((step.chunks[0].begin == 9 && step.chunks[0].end == 14));
  CHECK(b.block_table.size() == 4);
  CHECK(blocks.free_count() == 4);
  b.cached = 14;
  b.tokens.push_back(22);
  scheduler.park(&b);

  // a (evicted) resumes and is recomputed in full: 10 tokens, 3 blocks, which fit the 4 free.
  a.tokens.insert(a.tokens.end(), {40, 41, 42});
  a.prompt_length = 10;
  scheduler.resume(&a);
  step = scheduler.plan();
  REQUIRE(step.chunks.size() == 1);
  CHECK((step.chunks[0].begin == 0 && step.chunks[0].end == 10));
  CHECK(scheduler.evictions() == 1);
  // a decodes on (three tokens drawn, two run) until its next token needs a 4th block,
  // which takes the last free one; then a newcomer needs 2: b's pins go, and a runs on.
  a.tokens.insert(a.tokens.end(), {23, 24, 25});
  a.cached = 12;
  Sequence c;
  c.arrival = 2;
  c.tokens = {50, 51, 52, 53, 54};
  c.prompt_length = 5;
  scheduler.add(&c);
  step = scheduler.plan();
  CHECK(scheduler.preemptions() == 0);
  CHECK(scheduler.evictions() == 2);
  CHECK(b.block_table.empty());
  REQUIRE(step.chunks.size() == 2);
  CHECK(step.chunks[0].sequence == &a);
  CHECK(step.chunks[1].sequence == &c);

  scheduler.close(&b);  // evicted already: nothing to free
  scheduler.finish(&a);
  scheduler.finish(&c);
  CHECK(scheduler.idle());
  CHECK(blocks.free_count() == 8);
}

namespace {

// One multi-turn conversation per sample: after each turn, these tokens (a made-up tool
// message) come next, and the turn after gets `turn_tokens` at most.
struct Script {
  std::vector<std::vector<int32_t>> messages;  // per turn after the first
  std::vector<int64_t> turn_tokens;            // per turn, the first included
  std::vector<int64_t> delay_steps;            // per message: engine steps the "tool" takes
};

struct TurnRecord {
  std::vector<int32_t> prefix;  // everything before the turn's first drawn token
  GeneratedSample sample;
};

using Key = std::pair<uint64_t, int64_t>;  // request id, sample index

// Runs `requests` as sessions following `scripts` (keyed by request and sample), the
// continuations arriving after their delays while other samples decode. `extra`
// single-turn requests are added at step 3. Returns every turn of every session, and the
// single-turn samples.
std::map<Key, std::vector<TurnRecord>> run_sessions(RolloutEngine& engine, std::vector<GenerationRequest> requests,
                                                    const std::map<Key, Script>& scripts,
                                                    const std::vector<GenerationRequest>& extra,
                                                    std::vector<GeneratedSample>* extra_out) {
  std::map<Key, std::vector<TurnRecord>> turns;
  std::map<Key, std::vector<int32_t>> conversation;
  for (GenerationRequest& r : requests) {
    r.keep_session = true;
    for (int64_t i = 0; i < r.n; ++i) conversation[{r.id, i}] = r.prompt;
    engine.add_request(r);
  }
  struct Pending {
    int64_t ready_step;
    uint64_t session;
    Key key;
  };
  std::vector<Pending> pending;
  int64_t step = 0;
  while (engine.has_unfinished() || !pending.empty()) {
    if (step == 3) {
      for (const GenerationRequest& r : extra) engine.add_request(r);
    }
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->ready_step > step) {
        ++it;
        continue;
      }
      const Script& script = scripts.at(it->key);
      const size_t turn = turns[it->key].size();
      const std::vector<int32_t>& message = script.messages[turn - 1];
      std::vector<int32_t>& whole = conversation[it->key];
      whole.insert(whole.end(), message.begin(), message.end());
      engine.continue_session(it->session, message, script.turn_tokens[turn]);
      it = pending.erase(it);
    }
    for (GeneratedSample& s : engine.step()) {
      const Key key{s.request_id, s.sample_index};
      if (s.session == 0) {
        extra_out->push_back(std::move(s));
        continue;
      }
      std::vector<int32_t>& whole = conversation[key];
      std::vector<TurnRecord>& record = turns[key];
      REQUIRE(s.turn == static_cast<int64_t>(record.size()));
      record.push_back({whole, s});
      whole.insert(whole.end(), s.tokens.begin(), s.tokens.end());
      const Script& script = scripts.at(key);
      if (record.size() <= script.messages.size()) {
        pending.push_back({step + script.delay_steps[record.size() - 1], s.session, key});
      } else {
        engine.close_session(s.session);
      }
    }
    ++step;
    if (step >= 10000) {
      MESSAGE("stuck: unfinished " << engine.has_unfinished() << " pending " << pending.size() << " waiting sessions "
              << engine.waiting_sessions() << " used " << engine.stats().kv_blocks_used << " pinned "
              << engine.stats().kv_blocks_pinned);
    }
    REQUIRE(step < 10000);
  }
  return turns;
}

EngineOptions session_engine() {
  EngineOptions o;
  o.kv_cache_bytes = 8 << 20;
  o.block_size = 4;
  o.prefix_sharing = true;
  return o;
}

void check_same_turn(const GeneratedSample& got, const GeneratedSample& want) {
  CHECK(got.tokens == want.tokens);
  CHECK(got.logprobs == want.logprobs);
  CHECK(got.sampling_logprobs == want.sampling_logprobs);
  CHECK(got.finish_reason == want.finish_reason);
}

}  // namespace

TEST_CASE("engine: every session turn equals a fresh request for its whole prefix, kept, evicted or preempted") {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  INFO("seed " << seed);
  rng.seed(seed);
  const TestModel m = test_models()[static_cast<size_t>(rng() % 4)];
  INFO(m.name);
  const ModelWeights weights = random_model_weights(m.config, rng(), 0.3, true);
  const int32_t limit = static_cast<int32_t>(m.config.vocab_size - 1);  // never eos
  std::vector<GenerationRequest> requests;
  std::map<Key, Script> scripts;
  for (uint64_t id = 0; id < 4; ++id) {
    GenerationRequest r;
    r.id = id;
    r.prompt = random_tokens(rng, 3 + static_cast<int64_t>(rng() % 9), limit);
    r.n = 1 + static_cast<int64_t>(rng() % 3);
    r.sampling.temperature = id == 0 ? 0.0 : 0.9;
    r.sampling.top_k = id == 2 ? 10 : 0;
    r.stop_token_ids = {static_cast<int32_t>(rng() % limit), static_cast<int32_t>(rng() % limit)};
    r.seed = rng();
    const int64_t turns = 2 + static_cast<int64_t>(rng() % 3);
    r.max_new_tokens = 2 + static_cast<int64_t>(rng() % 6);
    for (int64_t i = 0; i < r.n; ++i) {
      Script s;
      s.turn_tokens.push_back(r.max_new_tokens);
      for (int64_t t = 1; t < turns; ++t) {
        s.messages.push_back(random_tokens(rng, static_cast<int64_t>(rng() % 7), limit));  // empty too
        s.turn_tokens.push_back(1 + static_cast<int64_t>(rng() % 7));
        s.delay_steps.push_back(static_cast<int64_t>(rng() % 6));
      }
      scripts[{id, i}] = s;
    }
    requests.push_back(r);
  }
  std::vector<GenerationRequest> single;
  for (uint64_t id = 100; id < 103; ++id) {
    GenerationRequest r;
    r.id = id;
    r.prompt = random_tokens(rng, 4 + static_cast<int64_t>(rng() % 6), limit);
    r.n = 2;
    r.max_new_tokens = 3 + static_cast<int64_t>(rng() % 8);
    r.sampling.temperature = 0.8;
    r.seed = rng();
    single.push_back(r);
  }

  struct Variant {
    const char* name;
    EngineOptions options;
  };
  std::vector<Variant> variants;
  variants.push_back({"sessions keep their blocks", session_engine()});
  EngineOptions nothing_kept = session_engine();
  nothing_kept.max_pinned_blocks = 0;
  variants.push_back({"nothing kept: every turn recomputed", nothing_kept});
  EngineOptions starved = session_engine();
  KvCacheShape shape{m.config.num_hidden_layers, m.config.num_key_value_heads, m.config.head_dim, 4, 0};
  starved.kv_cache_bytes = 14 * shape.bytes_per_block();  // 56 token slots for ~10 conversations of up to ~60
  starved.max_batch_tokens = 7;
  variants.push_back({"a cache too small for everyone, chunked prefill", starved});

  std::map<Key, std::vector<TurnRecord>> first;
  std::vector<GeneratedSample> first_single;
  for (const Variant& v : variants) {
    INFO(v.name);
    RolloutEngine engine(m.config, weights, v.options);
    std::vector<GeneratedSample> single_out;
    const auto turns = run_sessions(engine, requests, scripts, single, &single_out);
    CHECK(engine.waiting_sessions() == 0);
    CHECK(engine.stats().kv_blocks_used == 0);
    CHECK(engine.stats().kv_blocks_pinned == 0);
    int64_t continued = 0;
    for (const auto& [key, record] : turns) {
      INFO("request " << key.first << " sample " << key.second);
      const GenerationRequest& r = requests[key.first];
      REQUIRE(record.size() == scripts.at(key).turn_tokens.size());
      continued += static_cast<int64_t>(record.size()) - 1;
      for (const TurnRecord& turn : record) {
        INFO("turn " << turn.sample.turn);
        RolloutEngine fresh(m.config, weights, session_engine());
        GenerationRequest whole = r;
        whole.prompt = turn.prefix;
        whole.n = turn.sample.sample_index + 1;
        whole.max_new_tokens = scripts.at(key).turn_tokens[static_cast<size_t>(turn.sample.turn)];
        const std::vector<GeneratedSample> want = fresh.generate({whole});
        check_same_turn(turn.sample, want[static_cast<size_t>(turn.sample.sample_index)]);
      }
    }
    REQUIRE(single_out.size() == 6);
    for (const GeneratedSample& s : single_out) {
      RolloutEngine fresh(m.config, weights, session_engine());
      const std::vector<GeneratedSample> want = fresh.generate({single[s.request_id - 100]});
      check_same_turn(s, want[static_cast<size_t>(s.sample_index)]);
    }
    if (v.options.max_pinned_blocks == 0) {
      CHECK(engine.stats().session_tokens_reused == 0);
      CHECK(engine.stats().sessions_evicted > 0);
      CHECK(engine.stats().kv_blocks_pinned_peak == 0);
    } else if (v.options.max_batch_tokens == 7) {
      CHECK(engine.stats().kv_blocks_peak <= 14);
      CHECK(engine.stats().sessions_evicted > 0);
    } else {
      // Every continued turn found its whole earlier conversation cached but the last
      // drawn token (never run through the model before the turn ended).
      CHECK(engine.stats().sessions_evicted == 0);
      CHECK(engine.stats().session_tokens_reused > 0);
      CHECK(engine.stats().kv_blocks_pinned_peak > 0);
      int64_t reused = 0;
      for (const auto& [key, record] : turns) {
        for (size_t t = 1; t < record.size(); ++t) {
          reused += static_cast<int64_t>(record[t - 1].prefix.size() + record[t - 1].sample.tokens.size()) - 1;
        }
      }
      CHECK(engine.stats().session_tokens_reused == reused);
    }
    CHECK(continued > 0);
  }
}

TEST_CASE("engine: a weight update drops waiting sessions' blocks; their next turn uses the new weights") {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  INFO("seed " << seed);
  rng.seed(seed);
  const TestModel m = test_models()[0];
  const ModelWeights before = random_model_weights(m.config, rng(), 0.3, true);
  const ModelWeights after = random_model_weights(m.config, rng(), 0.3, true);
  const int32_t limit = static_cast<int32_t>(m.config.vocab_size - 1);
  GenerationRequest r;
  r.id = 7;
  r.prompt = random_tokens(rng, 9, limit);
  r.max_new_tokens = 5;
  r.sampling.temperature = 0.9;
  r.seed = rng();
  r.keep_session = true;
  RolloutEngine engine(m.config, before, session_engine());
  engine.add_request(r);
  std::vector<GeneratedSample> got;
  while (engine.has_unfinished()) {
    for (GeneratedSample& s : engine.step()) got.push_back(s);
  }
  REQUIRE(got.size() == 1);
  CHECK(engine.waiting_sessions() == 1);
  CHECK(engine.stats().kv_blocks_pinned > 0);
  engine.update_weights(after, 1);
  CHECK(engine.stats().kv_blocks_pinned == 0);
  CHECK(engine.stats().kv_blocks_used == 0);
  CHECK(engine.stats().sessions_evicted == 0);  // not counted as pressure

  const std::vector<int32_t> message = random_tokens(rng, 4, limit);
  engine.continue_session(got[0].session, message, 6);
  std::vector<GeneratedSample> second;
  while (engine.has_unfinished()) {
    for (GeneratedSample& s : engine.step()) second.push_back(s);
  }
  REQUIRE(second.size() == 1);
  CHECK(second[0].turn == 1);
  CHECK(second[0].weight_version == 1);
  CHECK(second[0].token_versions == std::vector<int64_t>(second[0].tokens.size(), 1));
  GenerationRequest whole = r;
  whole.keep_session = false;
  whole.prompt.insert(whole.prompt.end(), got[0].tokens.begin(), got[0].tokens.end());
  whole.prompt.insert(whole.prompt.end(), message.begin(), message.end());
  whole.max_new_tokens = 6;
  RolloutEngine fresh(m.config, after, session_engine());
  check_same_turn(second[0], fresh.generate({whole})[0]);
  engine.close_session(second[0].session);
  CHECK(engine.stats().kv_blocks_used == 0);
}

TEST_CASE("engine: bad continuations are clear errors and change nothing") {
  std::mt19937_64 rng(11);
  const TestModel m = test_models()[1];
  const ModelWeights weights = random_model_weights(m.config, rng(), 0.3, true);
  GenerationRequest r;
  r.id = 3;
  r.prompt = {1, 2, 3};
  r.max_new_tokens = 2;
  r.keep_session = true;
  RolloutEngine engine(m.config, weights, session_engine());
  engine.add_request(r);
  std::vector<GeneratedSample> got;
  while (engine.has_unfinished()) {
    for (GeneratedSample& s : engine.step()) got.push_back(s);
  }
  REQUIRE(got.size() == 1);
  const uint64_t session = got[0].session;
  CHECK(session != 0);
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([&] { engine.continue_session(session + 1, {1}, 2); }).find("is not waiting") != std::string::npos);
  CHECK(message([&] { engine.continue_session(session, {1, 97}, 2); }).find("token 1 of the next turn is 97") !=
        std::string::npos);
  CHECK(message([&] { engine.continue_session(session, {1}, 0); }).find("max_new_tokens must be >= 1") !=
        std::string::npos);
  CHECK(message([&] { engine.continue_session(session, std::vector<int32_t>(600, 1), 2); })
            .find("max_position_embeddings is 512") != std::string::npos);
  CHECK(engine.waiting_sessions() == 1);
  CHECK(!engine.has_unfinished());
  engine.continue_session(session, {4, 5}, 3);  // still usable
  while (engine.has_unfinished()) {
    for (GeneratedSample& s : engine.step()) {
      CHECK(s.turn == 1);
      engine.close_session(s.session);
    }
  }
  CHECK(message([&] { engine.close_session(session); }).find("is not waiting") != std::string::npos);
  CHECK(engine.stats().kv_blocks_used == 0);
}
