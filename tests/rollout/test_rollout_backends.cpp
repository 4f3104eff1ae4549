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
// Why this stays one file past ~500 lines: it is one conformance suite compiled three ways
// with different -D defines, so that every backend meets every case; parts of it would
// each have to be listed in all three executables.
#include "core/error.h"
#include "actor/tensor_parallel_layout.h"
#include "core/half.h"
#include "tests/support/backend_prefill.h"
#include "tests/support/forward_tolerance.h"
#include "tests/support/kernel_checks.h"
#include "kernels/device_probe.h"
#include "tests/support/reference_model.h"
#include "rollout/cuda_step_plan.h"
#include "rollout/engine.h"
#include "rollout/kv_cache.h"
#include "rollout/model_backend.h"

#ifdef TANDEM_ROLLOUT_BACKENDS_GPU
#define DOCTEST_CONFIG_IMPLEMENT
#endif
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

using namespace tandem;
using namespace tandem::testing;

namespace {

struct BackendUnderTest {
  const char* name;
  std::string device;
  std::string dtype;  // cuda only
  // Where activations are stored narrower than float32: the tolerances against the float64
  // reference and between steps of different shapes follow (tests/support/forward_tolerance.h).
  ActivationStorage storage;
  // Bit-identical results whatever else shares a step: batched, chunked and preempted
  // samples then draw exactly their solo tokens, sampled or greedy. Otherwise greedy
  // tokens must agree up to a near-tie (where both choices have nearly equal log-probs).
  bool batch_invariant;
  int tensor_parallel = 1;  // ranks the model is split over (the CPU backend's rollout.tensor_parallel)
};

// CPU: fp32 with row-wise products (batch-invariant by design, rollout/cpu_ops.h).
const BackendUnderTest kCpu{"cpu", "cpu", "", {}, true};
// The same split over 2 ranks (rollout/cpu_model.h): every test model divides by 2 (GQA and
// MHA heads split, MQA's one KV head replicated, the 97-id vocabulary padded to 98). Only
// the order of the row-parallel sums differs from "cpu" (two partial sums of K/2 terms
// added): a float32 sum in another order, inside the same bounds. Still row-wise, so still
// batch-invariant.
const BackendUnderTest kCpuSplit{"cpu tensor_parallel 2", "cpu", "", {}, true, 2};
// CPU with bfloat16 weights (rollout.cpu_weights: bf16), on bf16-exact weights: widening
// them is exact and every chain is fp32's, so the fp32 bounds hold (the outputs are fp32's
// bit for bit: "bf16 weights compute what fp32 computes on the rounded values" below).
const BackendUnderTest kCpuBf16Weights{"cpu bf16 weights", "cpu", "bf16", {}, true};
const BackendUnderTest kCpuSplitBf16Weights{"cpu bf16 weights tensor_parallel 2", "cpu", "bf16", {}, true, 2};
// CUDA fp32: the same math; cuBLAS picks kernels by problem size, so a token's logits may
// differ in the last bits with the step's shape.
const BackendUnderTest kCudaFp32{"cuda fp32", "cuda", "fp32", {}, false};
// CUDA bf16, on weights made bf16-exact (the float64 reference uses the same weights), so
// only activation storage rounds: every stored activation, the residual stream included,
// is rounded to bf16 (relative error <= 2^-9) about 15 times per layer (the bound takes
// 16). An emulation of the pipeline on these models measured logit errors up to 0.08 and
// log-prob errors up to 0.07 (mean 0.008) against float64, inside the derived bounds.
const BackendUnderTest kCudaBf16{"cuda bf16", "cuda", "bf16", {0x1p-9, 16}, false};
// Both split over 2 GPUs (rollout/cuda_tensor_parallel.h): NCCL sums the o/down partials,
// so fp32 differs from "cuda fp32" only in the order of two float32 sums. In bf16 each of
// the 2 row-parallel products per layer is rounded twice more (each rank's partial, then
// their sum): 4 roundings per layer on top of the 16.
const BackendUnderTest kCudaSplitFp32{"cuda fp32 tensor_parallel 2", "cuda", "fp32", {}, false, 2};
const BackendUnderTest kCudaSplitBf16{"cuda bf16 tensor_parallel 2", "cuda", "bf16", {0x1p-9, 20}, false, 2};

// Logits from two forwards of backend `b` (or one and the exact ones, `forwards` 1).
double logit_bound(const BackendUnderTest& b, const ModelConfig& c, const ModelWeights& w, int64_t max_tokens,
                   int forwards = 2) {
  return forwards * logit_tolerance(c, w, max_tokens, b.storage);
}

double logprob_bound(const BackendUnderTest& b, const ModelConfig& c, const ModelWeights& w, int64_t max_tokens,
                     double temperature, int forwards = 2) {
  return forwards * logprob_tolerance(c, w, max_tokens, temperature, b.storage);
}

// The backends this machine runs: split CUDA engines need a device per rank.
const std::vector<BackendUnderTest>& backends_under_test() {
#ifdef TANDEM_ROLLOUT_BACKENDS_GPU
  static const std::vector<BackendUnderTest> here = [] {
    const int devices = probe_cuda().device_count;
    std::vector<BackendUnderTest> backends;
    for (const BackendUnderTest& b : {kCudaFp32, kCudaBf16, kCudaSplitFp32, kCudaSplitBf16}) {
      if (b.tensor_parallel <= devices) backends.push_back(b);
      else std::printf("skipping %s: %d CUDA device(s) here\n", b.name, devices);
    }
    return backends;
  }();
#else
  static const std::vector<BackendUnderTest> here = {kCpu, kCpuSplit, kCpuBf16Weights, kCpuSplitBf16Weights};
#endif
  return here;
}

EngineOptions options_for(const BackendUnderTest& b, int64_t block_size = 4) {
  EngineOptions o;
  o.device = b.device;
  o.dtype = b.dtype.empty() ? "bf16" : b.dtype;
  if (b.device == "cpu" && b.dtype == "bf16") o.cpu_weights = "bf16";
  o.kv_cache_bytes = 8 << 20;  // cpu
  o.block_size = block_size;   // small blocks: sequences cross many block boundaries
  o.tensor_parallel = b.tensor_parallel;
  return o;
}

// bf16 backends get weights that bf16 holds exactly: the reference then sees what they see.
ModelWeights weights_for(const BackendUnderTest& b, const ModelConfig& config, uint64_t seed, double init_std) {
  ModelWeights w = random_model_weights(config, seed, init_std, true);
  if (b.dtype == "bf16") {
    std::vector<WeightTensor> tensors = w.tensors();
    for (WeightTensor& t : tensors) {
      for (float& x : t.data) x = bf16_to_float(float_to_bf16(x));
    }
    w = ModelWeights(std::move(tensors));
  }
  return w;
}

// Prompt tokens: never the test models' eos id (vocab - 1).
std::vector<int32_t> prompt_tokens(std::mt19937_64& rng, int64_t length, int64_t vocab) {
  return random_tokens(rng, length, vocab - 1);
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

std::vector<double> flatten(const Matrix& m) {
  std::vector<double> out;
  for (const std::vector<double>& row : m) out.insert(out.end(), row.begin(), row.end());
  return out;
}

// Blocks [first, first + count) in scattered order.
std::vector<int32_t> scattered_blocks(int32_t first, int32_t count) {
  std::vector<int32_t> table;
  for (int32_t i = 0; i < count; ++i) table.push_back(first + (i * 7) % count);  // count is never a multiple of 7
  return table;
}

// Samples of the same requests from two runs: equal tokens (batch-invariant backends), or
// greedy tokens equal up to a near-tie after which the runs may go their own ways.
void check_same_samples(const BackendUnderTest& b, const std::vector<GeneratedSample>& got,
                        const std::vector<GeneratedSample>& want, double logprob_agreement, const std::string& how) {
  INFO(b.name << ": " << how);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("request " << got[i].request_id << " sample " << got[i].sample_index);
    CHECK(got[i].request_id == want[i].request_id);
    CHECK(got[i].sample_index == want[i].sample_index);
    if (b.batch_invariant) {
      CHECK(got[i].tokens == want[i].tokens);
      CHECK(got[i].finish_reason == want[i].finish_reason);
    }
    const size_t common = std::min(got[i].tokens.size(), want[i].tokens.size());
    for (size_t t = 0; t < common; ++t) {
      INFO("token " << t);
      CHECK(std::abs(got[i].logprobs[t] - want[i].logprobs[t]) <= logprob_agreement);
      if (got[i].tokens[t] != want[i].tokens[t]) break;  // a near-tie (just checked): the runs part here
    }
  }
}

}  // namespace

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

#ifndef TANDEM_ROLLOUT_BACKENDS_GPU

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
    CHECK(std::memcmp(from_bf16.data(), from_rounded.data(), from_bf16.size() * sizeof(float)) == 0);
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

#else  // the GPU variant

namespace {

std::vector<double> log_softmax_row(const float* logits, int64_t vocab) {
  return reference_log_softmax(std::vector<double>(logits, logits + vocab), 1.0);
}

}  // namespace

TEST_CASE("cuda matches the cpu backend: greedy tokens (fp32) and log-probs of the same tokens") {
  auto rng = kernel_test_rng(6);
  for (const BackendUnderTest& b : backends_under_test()) {
    for (const TestModel& m : test_models()) {
      INFO(b.name << ": " << m.name);
      ModelWeights weights = weights_for(b, m.config, rng(), 0.15);
      // Against the CPU backend on the same (bf16-exact for bf16) weights: each within its
      // own bound of the exact log-probs (prompts and responses within 44 tokens).
      const double tolerance = logprob_bound(b, m.config, weights, 44, 1.0, 1) + logprob_bound(kCpu, m.config, weights, 44, 1.0, 1);
      RolloutEngine cpu(m.config, weights, options_for(kCpu));
      std::unique_ptr<ModelBackend> cuda = make_model_backend(m.config, weights, options_for(b, 16));
      RolloutEngine cuda_engine(m.config, weights, options_for(b));
      std::vector<GenerationRequest> requests;
      for (uint64_t id = 0; id < 4; ++id) {
        GenerationRequest r;
        r.id = id;
        r.prompt = prompt_tokens(rng, 2 + 9 * id, m.config.vocab_size);
        r.max_new_tokens = 16;
        r.ignore_eos = true;
        r.sampling.temperature = 0;
        requests.push_back(r);
      }
      const std::vector<GeneratedSample> want = cpu.generate(requests);
      const std::vector<GeneratedSample> got = cuda_engine.generate(requests);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("request " << i);
        if (b.dtype == "fp32") CHECK(got[i].tokens == want[i].tokens);
        // The CPU's tokens scored by the cuda backend in one prefill (bf16 may choose differently at near-ties).
        std::vector<int32_t> sequence = requests[i].prompt;
        sequence.insert(sequence.end(), want[i].tokens.begin(), want[i].tokens.end());
        const std::vector<float> logits = prefill_logits(*cuda, sequence, scattered_blocks(0, 5));
        const int64_t vocab = m.config.vocab_size;
        for (size_t t = 0; t < want[i].tokens.size(); ++t) {
          const size_t row = requests[i].prompt.size() + t - 1;
          const double lp = log_softmax_row(&logits[row * vocab], vocab)[want[i].tokens[t]];
          INFO("token " << t);
          CHECK(std::abs(lp - want[i].logprobs[t]) <= tolerance);
        }
      }
    }
  }
}

TEST_CASE("cuda options: unknown dtype, and the KV cache honours max_kv_blocks") {
  const TestModel m = test_models()[0];
  ModelWeights weights = random_model_weights(m.config, 1);
  EngineOptions options = options_for(kCudaFp32);
  options.dtype = "fp16";
  CHECK_THROWS_WITH_AS(make_model_backend(m.config, weights, options), doctest::Contains("dtype \"fp16\""),
                       tandem::Error);
  options.dtype = "bf16";
  options.max_kv_blocks = 33;
  CHECK(make_model_backend(m.config, weights, options)->kv_blocks() == 33);
  options.max_kv_blocks = 0;
  options.max_running = 3;  // at most 3 sequences of 512 positions in 4-token blocks
  CHECK(make_model_backend(m.config, weights, options)->kv_blocks() == 3 * 128);
  CHECK(make_model_backend(m.config, weights, options)->name().find("cuda bf16") == 0);
  // Split: a rank per device from cuda_device on, each with the blocks asked for.
  const int devices = probe_cuda().device_count;
  options.tensor_parallel = 2;
  options.max_kv_blocks = 21;
  if (devices >= 2) {
    std::unique_ptr<ModelBackend> split = make_model_backend(m.config, weights, options);
    CHECK(split->tensor_parallel() == 2);
    CHECK(split->kv_blocks() == 21);
    CHECK(split->name().find("cuda bf16, tensor_parallel 2 (devices 0..1") == 0);
  }
  options.cuda_device = devices - 1;  // the second rank has no device
  const std::string missing =
      fmt::format("the engine needs CUDA devices {}..{}; there are {}", devices - 1, devices, devices);
  CHECK_THROWS_WITH_AS(make_model_backend(m.config, weights, options), doctest::Contains(missing.c_str()),
                       tandem::Error);
}

int main(int argc, char** argv) {
  const CudaProbe probe = probe_cuda();
  if (!probe.usable) {
    std::printf("SKIPPED: no usable CUDA device: %s\n", probe.detail.c_str());
    return 77;
  }
  std::printf("rollout backend tests on %s\n", probe.detail.c_str());
  kernel_test_seed();  // prints the seed
  doctest::Context context(argc, argv);
  return context.run();
}

#endif
