// Prefix sharing in the rollout engine (rollout/scheduler.h): the samples of a prompt
// prefill it once and list the same KV blocks, copy-on-write.
// - The scheduler alone: who shares which blocks, reference counts, the copies planned
//   for a prompt's partly filled last block, sharers returned to the queue when their
//   leader is preempted, and every block free again at the end.
// - The CPU engine: tokens, log-probs and finish reasons bit-identical with sharing on and
//   off (greedy and sampled, prompts a multiple of the block size and not, groups from one
//   request's n and from identical prompts of separate requests), with chunked prefill and
//   with preemption; the prefill tokens saved; no block leaked.
// (The backends' block copy itself is in the conformance suite, test_rollout_backends.cpp.)
#include "tests/support/reference_model.h"
#include "rollout/engine.h"
#include "rollout/kv_cache.h"
#include "rollout/scheduler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>

using namespace tandem;
using namespace tandem::testing;

namespace {

// A group of `n` new sequences with the same prompt, arrivals from `first_arrival`.
std::vector<Sequence> group(const std::vector<int32_t>& prompt, int n, int64_t first_arrival) {
  std::vector<Sequence> sequences(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    sequences[i].arrival = first_arrival + i;
    sequences[i].tokens = prompt;
    sequences[i].prompt_length = static_cast<int64_t>(prompt.size());
  }
  return sequences;
}

// What the engine does after a step: every chunk is cached, and those at the end of
// their tokens draw one (token 1 here).
void run_step(const ScheduledStep& step) {
  for (const ScheduledChunk& c : step.chunks) c.sequence->cached = c.end;
  for (const ScheduledChunk& c : step.chunks) {
    if (c.end == static_cast<int64_t>(c.sequence->tokens.size())) c.sequence->tokens.push_back(1);
  }
}

}  // namespace

TEST_CASE("scheduler: a group's samples list the prompt's blocks and copy its last one before writing") {
  BlockAllocator blocks(32);
  Scheduler scheduler(blocks, SchedulerOptions{4, 64, 16, true});
  // 6 prompt tokens in blocks of 4: one full block and one with 2 of 4 slots filled.
  std::vector<Sequence> samples = group({5, 6, 7, 8, 9, 10}, 3, 0);
  for (Sequence& s : samples) scheduler.add(&s);

  ScheduledStep step = scheduler.plan();
  REQUIRE(step.chunks.size() == 3);
  CHECK(step.chunks[0].sequence == &samples[0]);
  CHECK((step.chunks[0].begin == 0 && step.chunks[0].end == 6 && step.chunks[0].logits_of == nullptr));
  for (int i = 1; i < 3; ++i) {
    CHECK(step.chunks[i].sequence == &samples[i]);
    CHECK((step.chunks[i].begin == 6 && step.chunks[i].end == 6));
    CHECK(step.chunks[i].logits_of == &samples[0]);
    CHECK(samples[i].block_table == samples[0].block_table);
  }
  CHECK(step.copies.empty());
  REQUIRE(samples[0].block_table.size() == 2);
  const int32_t full = samples[0].block_table[0], last = samples[0].block_table[1];
  CHECK(blocks.references(full) == 3);
  CHECK(blocks.references(last) == 3);
  CHECK(blocks.free_count() == 30);
  run_step(step);

  // Each writes its first drawn token at position 6, inside the shared last block: the
  // first two get copies, the third (then its only holder) writes in place.
  step = scheduler.plan();
  REQUIRE(step.chunks.size() == 3);
  REQUIRE(step.copies.size() == 2);
  for (const KvBlockCopy& copy : step.copies) CHECK(copy.from == last);
  CHECK(step.copies[0].to != step.copies[1].to);
  CHECK(samples[0].block_table == std::vector<int32_t>{full, step.copies[0].to});
  CHECK(samples[1].block_table == std::vector<int32_t>{full, step.copies[1].to});
  CHECK(samples[2].block_table == std::vector<int32_t>{full, last});
  CHECK(blocks.references(full) == 3);
  CHECK(blocks.references(last) == 1);
  run_step(step);

  // Nothing is shared any more where they write.
  step = scheduler.plan();
  CHECK(step.copies.empty());
  for (Sequence& s : samples) scheduler.finish(&s);
  CHECK(blocks.free_count() == 32);
  CHECK(scheduler.idle());
}

TEST_CASE("scheduler: a prompt that fills its blocks needs no copy; sharing off shares nothing") {
  for (bool sharing : {true, false}) {
    INFO("prefix_sharing " << sharing);
    BlockAllocator blocks(32);
    Scheduler scheduler(blocks, SchedulerOptions{4, 64, 16, sharing});
    std::vector<Sequence> samples = group({5, 6, 7, 8, 9, 10, 11, 12}, 4, 0);
    for (Sequence& s : samples) scheduler.add(&s);
    ScheduledStep step = scheduler.plan();
    REQUIRE(step.chunks.size() == 4);
    for (const ScheduledChunk& c : step.chunks) {
      CHECK(c.end == 8);
      CHECK(c.begin == (sharing && c.sequence != &samples[0] ? 8 : 0));
    }
    CHECK(blocks.free_count() == (sharing ? 30 : 24));
    run_step(step);
    step = scheduler.plan();  // position 8 starts a block of each one's own
    CHECK(step.copies.empty());
    CHECK(blocks.free_count() == (sharing ? 26 : 20));
    for (Sequence& s : samples) scheduler.finish(&s);
    CHECK(blocks.free_count() == 32);
  }
}

TEST_CASE("scheduler: sharers wait on a chunked prefill, count against max_running, and requeue on preemption") {
  BlockAllocator blocks(32);
  // 10 prompt tokens, 4 per step; at most 3 sequences hold blocks (or wait to share).
  Scheduler scheduler(blocks, SchedulerOptions{4, 4, 3, true});
  std::vector<Sequence> samples = group({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 5, 0);
  for (Sequence& s : samples) scheduler.add(&s);

  ScheduledStep step = scheduler.plan();
  REQUIRE(step.chunks.size() == 1);  // the leader's first chunk; samples 1 and 2 wait to share
  CHECK(step.chunks[0].end == 4);
  run_step(step);
  step = scheduler.plan();
  REQUIRE(step.chunks.size() == 1);
  CHECK(step.chunks[0].end == 8);
  run_step(step);
  step = scheduler.plan();
  REQUIRE(step.chunks.size() == 3);  // the prompt's last chunk and its 2 sharers
  CHECK(step.chunks[0].end == 10);
  CHECK((step.chunks[1].sequence == &samples[1] && step.chunks[2].sequence == &samples[2]));
  CHECK((step.chunks[1].logits_of == &samples[0] && step.chunks[2].logits_of == &samples[0]));
  run_step(step);
  for (int i = 0; i < 3; ++i) scheduler.finish(&samples[i]);
  CHECK(blocks.free_count() == 32);

  // A pair with too few blocks for both to grow after sharing: the later one is preempted
  // and recomputed alone (it has drawn a token), the other keeps the blocks.
  BlockAllocator few(3);
  Scheduler tight(few, SchedulerOptions{4, 64, 8, true});
  std::vector<Sequence> pair = group({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, 0);
  for (Sequence& s : pair) tight.add(&s);
  step = tight.plan();
  REQUIRE(step.chunks.size() == 2);
  CHECK(few.free_count() == 0);
  run_step(step);
  step = tight.plan();  // the leader's copy-on-write finds no free block: the sharer goes
  CHECK(tight.preemptions() == 1);
  REQUIRE(step.chunks.size() == 1);
  CHECK(step.chunks[0].sequence == &pair[0]);
  CHECK(step.copies.empty());  // its sharer's references are gone: it writes in place
  CHECK(pair[1].block_table.empty());
  run_step(step);
  tight.finish(&pair[0]);
  step = tight.plan();
  REQUIRE(step.chunks.size() == 1);
  CHECK((step.chunks[0].sequence == &pair[1] && step.chunks[0].begin == 0 && step.chunks[0].end == 11));
  run_step(step);
  tight.finish(&pair[1]);
  CHECK(few.free_count() == 3);

  // A leader preempted in the middle of its prefill hands its sharers back to the queue.
  BlockAllocator two(4);
  Scheduler chunked(two, SchedulerOptions{4, 4, 8, true});
  std::vector<Sequence> other = group({9, 9}, 1, 0);
  std::vector<Sequence> trio = group({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 3, 1);
  chunked.add(&other[0]);
  for (Sequence& s : trio) chunked.add(&s);
  step = chunked.plan();  // other [0, 2) and the trio leader's [0, 2)
  REQUIRE(step.chunks.size() == 2);
  run_step(step);
  // other decodes while the leader prefills 3 tokens a step, until other, growing, takes
  // the block the leader's last chunk needs: the leader is preempted.
  for (int i = 0; i < 8 && chunked.preemptions() == 0; ++i) run_step(chunked.plan());
  CHECK(chunked.preemptions() > 0);
  // Everyone still finishes, and every block comes back.
  std::vector<Sequence*> all = {&other[0], &trio[0], &trio[1], &trio[2]};
  for (int i = 0; i < 200 && !chunked.idle(); ++i) {
    step = chunked.plan();
    run_step(step);
    for (const ScheduledChunk& c : step.chunks) {
      if (c.sequence->tokens.size() >= 14) chunked.finish(c.sequence);
    }
  }
  CHECK(chunked.idle());
  CHECK(two.free_count() == 4);
}

namespace {

EngineOptions sharing_engine(bool sharing) {
  EngineOptions o;
  o.kv_cache_bytes = 8 << 20;
  o.block_size = 4;
  o.prefix_sharing = sharing;
  return o;
}

// Bit-identical: same tokens, log-probs and finish reasons.
void check_identical(const std::vector<GeneratedSample>& got, const std::vector<GeneratedSample>& want,
                     const std::string& how) {
  INFO(how);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("request " << got[i].request_id << " sample " << got[i].sample_index);
    CHECK(got[i].request_id == want[i].request_id);
    CHECK(got[i].sample_index == want[i].sample_index);
    CHECK(got[i].tokens == want[i].tokens);
    CHECK(got[i].logprobs == want[i].logprobs);
    CHECK(got[i].sampling_logprobs == want[i].sampling_logprobs);
    CHECK(got[i].finish_reason == want[i].finish_reason);
  }
}

}  // namespace

TEST_CASE("engine: sharing a prompt's prefill gives bit-identical samples, saves (n - 1) x prompt tokens, leaks no block") {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  INFO("seed " << seed);
  rng.seed(seed);
  const TestModel m = test_models()[3];
  const ModelWeights weights = random_model_weights(m.config, rng(), 0.3, true);
  // Groups of 5: prompts of 8 (two full blocks of 4) and 7 tokens (the last block partly
  // filled), greedy and sampled, plus a prompt sent as 3 separate requests of n = 1 and
  // one request of n = 1 (nothing to share).
  std::vector<GenerationRequest> requests;
  int64_t expected_saved = 0;
  const std::vector<int64_t> lengths = {8, 7, 8, 7, 13};
  for (size_t i = 0; i < lengths.size(); ++i) {
    GenerationRequest r;
    r.id = i;
    r.prompt = random_tokens(rng, lengths[i], m.config.vocab_size - 1);  // never eos (vocab - 1)
    r.n = 5;
    r.max_new_tokens = 6 + static_cast<int64_t>(rng() % 10);
    r.sampling.temperature = i % 2 == 0 ? 0.0 : 0.9;
    r.sampling.top_k = i == 3 ? 12 : 0;
    r.sampling.top_p = i == 4 ? 0.9 : 1.0;
    r.seed = rng();
    requests.push_back(r);
    expected_saved += (r.n - 1) * lengths[i];
  }
  const std::vector<int32_t> repeated = random_tokens(rng, 10, m.config.vocab_size - 1);
  for (uint64_t i = 0; i < 3; ++i) {
    GenerationRequest r;
    r.id = 100 + i;
    r.prompt = repeated;
    r.max_new_tokens = 9;
    r.sampling.temperature = 0.7;
    r.seed = rng();
    requests.push_back(r);
  }
  expected_saved += 2 * 10;
  GenerationRequest lone;
  lone.id = 200;
  lone.prompt = random_tokens(rng, 5, m.config.vocab_size - 1);
  lone.seed = rng();
  requests.push_back(lone);

  std::vector<GeneratedSample> unshared;
  int64_t unshared_prefill = 0;
  {
    RolloutEngine engine(m.config, weights, sharing_engine(false));
    unshared = engine.generate(requests);
    CHECK(engine.stats().prefill_tokens_saved == 0);
    CHECK(engine.stats().kv_blocks_used == 0);
    unshared_prefill = engine.stats().prefill_tokens;
  }
  {
    RolloutEngine engine(m.config, weights, sharing_engine(true));
    check_identical(engine.generate(requests), unshared, "all at once");
    CHECK(engine.stats().prefill_tokens_saved == expected_saved);
    CHECK(engine.stats().prefill_tokens + engine.stats().prefill_tokens_saved == unshared_prefill);
    CHECK(engine.stats().kv_blocks_used == 0);
  }
  {
    EngineOptions chunked = sharing_engine(true);
    chunked.max_batch_tokens = 5;  // prompts prefill over several steps; sharers wait for them
    chunked.max_running = 4;       // groups of 5 are split: a leader and 3 sharers, then the rest
    RolloutEngine engine(m.config, weights, chunked);
    check_identical(engine.generate(requests), unshared, "chunked prefill, at most 4 running");
    CHECK(engine.stats().prefill_tokens_saved > 0);
    CHECK(engine.stats().kv_blocks_used == 0);
  }
  {
    EngineOptions starved = sharing_engine(true);
    KvCacheShape shape{m.config.num_hidden_layers, m.config.num_key_value_heads, m.config.head_dim, 4, 0};
    starved.kv_cache_bytes = 12 * shape.bytes_per_block();  // 48 token slots for 29 samples
    RolloutEngine engine(m.config, weights, starved);
    REQUIRE(engine.stats().kv_blocks_total == 12);
    check_identical(engine.generate(requests), unshared, "KV cache too small for everyone: preemption");
    CHECK(engine.stats().preemptions > 0);
    CHECK(engine.stats().prefill_tokens_saved > 0);
    CHECK(engine.stats().kv_blocks_peak <= 12);
    CHECK(engine.stats().kv_blocks_used == 0);
  }
  {
    // Requests arriving one per step: a group shares when its samples wait together.
    RolloutEngine engine(m.config, weights, sharing_engine(true));
    std::vector<GeneratedSample> got;
    size_t next = 0;
    while (next < requests.size() || engine.has_unfinished()) {
      if (next < requests.size()) engine.add_request(requests[next++]);
      for (GeneratedSample& s : engine.step()) got.push_back(std::move(s));
    }
    std::sort(got.begin(), got.end(), [&](const GeneratedSample& a, const GeneratedSample& b) {
      return a.request_id != b.request_id ? a.request_id < b.request_id : a.sample_index < b.sample_index;
    });
    check_identical(got, unshared, "requests arriving during generation");
    CHECK(engine.stats().prefill_tokens_saved >= 4 * (8 + 7 + 8 + 7 + 13));
    CHECK(engine.stats().kv_blocks_used == 0);
  }
}
