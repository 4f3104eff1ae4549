// GPU suite, sampling: sample_tokens against kernels/reference/sampling_reference.h, with
// the same Philox uniform per row. Kept sets and log-probs on vocabularies up to 151936
// (ties included), greedy rows, bad rows, and a chi-square frequency test over 200,000
// draws per parameter set in which no token outside top-k/top-p may ever appear.
// (main: test_kernels.cpp.)
#if TANDEM_WITH_CUDA

#include "kernels/philox.h"
#include "kernels/reference/sampling_reference.h"
#include "kernels/sampling.h"
#include "tests/support/chi_square.h"
#include "tests/support/kernel_device.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace tandem;
using namespace tandem::testing;
namespace ref = tandem::kernels::reference;

namespace {

// Log-probs in fp32 from fp32 logits: z = logit / T rounds once, the log-sum-exp sums in
// fp32 over up to 151936 terms.
constexpr Tolerance kLogprob{5e-5, 1e-5};

struct SamplingRows {
  std::vector<float> logits;  // [rows, vocab], or one row shared by all (stride 0)
  int64_t stride = 0, rows = 0, vocab = 0;
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> positions;
  // Outputs.
  std::vector<int32_t> tokens;
  std::vector<float> logprobs, sampling_logprobs;

  void add(float t, int32_t k, float p, uint64_t seed, int64_t position) {
    temperature.push_back(t);
    top_k.push_back(k);
    top_p.push_back(p);
    seeds.push_back(seed);
    positions.push_back(position);
    ++rows;
  }
  const float* row(int64_t r) const { return logits.data() + r * stride; }
  double uniform(int64_t r) const {
    return kernels::philox_uniform(seeds[r], static_cast<uint64_t>(positions[r]));
  }
  ref::SampleReference reference(int64_t r) const {
    return ref::sample(row(r), vocab, temperature[r], top_k[r], top_p[r], uniform(r));
  }

  void run() {
    TestStream stream;
    DeviceBuffer<float> logits_d(logits), temperature_d(temperature), top_p_d(top_p);
    DeviceBuffer<int32_t> top_k_d(top_k);
    DeviceBuffer<uint64_t> seeds_d(seeds);
    DeviceBuffer<int64_t> positions_d(positions);
    DeviceBuffer<int32_t> tokens_d(static_cast<size_t>(rows));
    DeviceBuffer<float> logprobs_d(static_cast<size_t>(rows)), sampling_d(static_cast<size_t>(rows));
    tokens_d.poison();
    logprobs_d.poison();
    sampling_d.poison();
    kernels::SamplingBatch batch;
    batch.logits = logits_d.get();
    batch.logits_stride = stride;
    batch.rows = rows;
    batch.vocab = vocab;
    batch.temperature = temperature_d.get();
    batch.top_k = top_k_d.get();
    batch.top_p = top_p_d.get();
    batch.seeds = seeds_d.get();
    batch.positions = positions_d.get();
    kernels::sample_tokens(batch, {tokens_d.get(), logprobs_d.get(), sampling_d.get()}, stream.get());
    stream.sync();
    tokens = tokens_d.download();
    logprobs = logprobs_d.download();
    sampling_logprobs = sampling_d.download();
  }
};

// log softmax(logits / T)[token] in float64 (T = 1 when greedy).
double full_logprob(const float* logits, int64_t vocab, double temperature, int32_t token) {
  const double t = temperature == 0 ? 1.0 : temperature;
  double m = -INFINITY, sum = 0;
  for (int64_t i = 0; i < vocab; ++i) m = std::max(m, logits[i] / t);
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(logits[i] / t - m);
  return logits[token] / t - m - std::log(sum);
}

// A top_p half-way between two consecutive cumulative masses of the top-k-kept tokens
// (in the kernel's order), so that fp32 vs float64 rounding cannot move the boundary;
// 1 when no gap is wide enough.
float robust_top_p(std::mt19937_64& rng, const float* logits, int64_t vocab, float temperature, int32_t top_k) {
  const ref::SampleReference k_only = ref::sample(logits, vocab, temperature, top_k, 1.0, 0.0);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> cumulative;
  double c = 0;
  for (int32_t t : order) {
    if (!k_only.kept[t]) continue;
    cumulative.push_back(c += k_only.probabilities[t]);
  }
  std::vector<float> candidates;
  for (size_t j = 0; j + 1 < cumulative.size(); ++j) {
    if (cumulative[j + 1] - cumulative[j] > 1e-3 && cumulative[j + 1] < 0.999) {
      candidates.push_back(static_cast<float>((cumulative[j] + cumulative[j + 1]) / 2));
    }
  }
  return candidates.empty() ? 1.0f : candidates[rng() % candidates.size()];
}

// Whether u * kept mass falls within `margin` of a cumulative boundary of the kept tokens
// in id order, where fp32 vs float64 masses could pick the neighbouring token.
bool near_boundary(const ref::SampleReference& r, double uniform, double margin) {
  double c = 0;
  for (size_t i = 0; i < r.probabilities.size(); ++i) {
    if (!r.kept[i]) continue;
    c += r.probabilities[i];
    if (std::abs(c - uniform) < margin) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("sample_tokens keeps the reference's tokens, draws its token, and reports its log-probs") {
  auto rng = kernel_test_rng(301);
  for (int64_t vocab : {50, 1000, 32000, 151936}) {
    SamplingRows s;
    s.vocab = vocab;
    s.stride = vocab + 3;  // rows need not be packed
    const int64_t rows = 48;
    std::normal_distribution<float> normal(0.0f, 3.0f);
    s.logits.resize(rows * s.stride);
    for (int64_t r = 0; r < rows; ++r) {
      const bool ties = r % 3 == 0;  // logits on a coarse grid: runs of equal values at the boundaries
      for (int64_t i = 0; i < vocab; ++i) {
        const float x = normal(rng);
        s.logits[r * s.stride + i] = ties ? std::round(x * 2.0f) / 2.0f : x;
      }
      const float t = r % 8 == 0 ? 0.0f : 0.3f + static_cast<float>(rng() % 100) / 60.0f;
      const int32_t choices[] = {0, 1, 1 + static_cast<int32_t>(rng() % 100), static_cast<int32_t>(vocab + 5)};
      const int32_t k = choices[rng() % 4];
      const float p = t == 0 || r % 4 == 1 ? 1.0f : robust_top_p(rng, &s.logits[r * s.stride], vocab, t, k);
      s.add(t, k, p, rng(), static_cast<int64_t>(rng() % 100000));
    }
    s.run();
    std::vector<double> got_lp, want_lp, got_slp, want_slp;
    int same_token = 0, comparable = 0;
    for (int64_t r = 0; r < rows; ++r) {
      INFO("vocab " << vocab << " row " << r << " T " << s.temperature[r] << " top_k " << s.top_k[r] << " top_p "
                    << s.top_p[r]);
      const ref::SampleReference want = s.reference(r);
      const int32_t token = s.tokens[r];
      REQUIRE_MESSAGE((token >= 0 && token < vocab), "token " << token);
      REQUIRE_MESSAGE(want.kept[token], "token " << token << " is outside the kept set");
      if (!near_boundary(want, s.uniform(r), 1e-6)) {
        ++comparable;
        same_token += token == want.token;
        CHECK_MESSAGE(token == want.token, "same uniform, reference drew " << want.token);
      }
      got_lp.push_back(s.logprobs[r]);
      want_lp.push_back(full_logprob(s.row(r), vocab, s.temperature[r], token));
      got_slp.push_back(s.sampling_logprobs[r]);
      want_slp.push_back(s.temperature[r] == 0 ? 0.0 : std::log(want.probabilities[token]));
    }
    INFO("vocab " << vocab << ": " << same_token << " of " << comparable << " rows drew the reference's token");
    check_close("logprob", got_lp, want_lp, kLogprob);
    check_close("sampling_logprob", got_slp, want_slp, kLogprob);
  }
}

TEST_CASE("greedy takes the lowest id among equal maxima; bad rows give -1 and NaN") {
  SamplingRows s;
  s.vocab = 7;
  s.stride = 7;
  s.logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f, 0.0f,   // greedy: tie at ids 1 and 3
              0.5f, 2.0f, NAN, 2.0f, 1.0f, 0.0f, 0.0f,     // a NaN logit
              0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f, 0.0f,   // temperature < 0
              0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f, 0.0f,   // top_p 0
              -INFINITY, 1.0f, -INFINITY, 0.0f, -INFINITY, -INFINITY, 2.0f,  // masked tokens never drawn
              -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,  // nothing to draw
              0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f, 0.0f};  // logits / T overflow fp32 (1 / T is inf)
  s.add(0.0f, 0, 1.0f, 1, 0);
  s.add(1.0f, 0, 1.0f, 1, 0);
  s.add(-1.0f, 0, 1.0f, 1, 0);
  s.add(1.0f, 0, 0.0f, 1, 0);
  s.add(1.0f, 0, 1.0f, 99, 3);
  s.add(1.0f, 3, 0.9f, 5, 1);
  s.add(1e-39f, 0, 1.0f, 5, 1);
  s.run();
  CHECK(s.tokens[0] == 1);
  CHECK(s.logprobs[0] == doctest::Approx(full_logprob(s.row(0), 7, 0.0, 1)).epsilon(1e-5));
  CHECK(s.sampling_logprobs[0] == 0.0f);
  for (int r = 1; r <= 3; ++r) {
    CHECK(s.tokens[r] == -1);
    CHECK(std::isnan(s.logprobs[r]));
    CHECK(std::isnan(s.sampling_logprobs[r]));
  }
  CHECK((s.tokens[4] == 1 || s.tokens[4] == 3 || s.tokens[4] == 6));
  CHECK(std::isfinite(s.logprobs[4]));
  for (int r = 5; r <= 6; ++r) {
    INFO("row " << r);
    CHECK(s.tokens[r] == -1);
    CHECK(std::isnan(s.logprobs[r]));
    CHECK(std::isnan(s.sampling_logprobs[r]));
  }
}

TEST_CASE("sampled frequencies match the distribution; tokens outside top-k/top-p never appear") {
  auto rng = kernel_test_rng(302);
  struct Params {
    float temperature;
    int32_t top_k;
    float top_p;
    bool ties;
  };
  const Params cases[] = {{1.0f, 0, 1.0f, false},  {0.5f, 0, 1.0f, false}, {1.7f, 0, 1.0f, false},
                          {1.0f, 5, 1.0f, false},  {1.0f, 0, 0.8f, false}, {0.8f, 12, 0.9f, false},
                          {1.0f, 1, 1.0f, false},  {1.0f, 7, 1.0f, true},  {1.2f, 0, 0.7f, true}};
#if defined(TANDEM_CUDASIM) && (defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__))
  // Under the CPU simulator (tools/cudasim) each draw is a whole block of 512 fibers, and
  // sanitizers slow those several times: scaled-down variants. The kept-set check is as
  // strict; chi-square pools the ids below 5 expected draws and keeps its 1e-7 false-alarm rate.
  const int64_t vocab = 40, draws = 300;
#elif defined(TANDEM_CUDASIM)
  const int64_t vocab = 40, draws = 2000;
#else
  const int64_t vocab = 40, draws = 200000;
#endif
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const Params& p : cases) {
    SamplingRows s;
    s.vocab = vocab;
    s.stride = 0;  // one row of logits for every draw
    for (int64_t i = 0; i < vocab; ++i) {
      const float x = normal(rng);
      s.logits.push_back(p.ties ? std::round(x) : x);
    }
    const uint64_t seed = rng();
    for (int64_t i = 0; i < draws; ++i) s.add(p.temperature, p.top_k, p.top_p, seed, i);
    s.run();
    const ref::SampleReference want = ref::sample(s.logits.data(), vocab, p.temperature, p.top_k, p.top_p, 0.0);
    std::vector<int64_t> counts(vocab, 0);
    int64_t outside = 0;
    for (int32_t t : s.tokens) {
      REQUIRE_MESSAGE((t >= 0 && t < vocab), "token " << t);
      ++counts[t];
      outside += !want.kept[t];
    }
    INFO("temperature " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p << " ties " << p.ties);
    CHECK_MESSAGE(outside == 0, outside << " draws outside the kept set");
    int dof = 0;
    const double stat = testing::chi_square(counts, want.probabilities, draws, &dof);
    const double critical = testing::chi_square_critical_p1e7(dof);
    CHECK_MESSAGE(stat < critical, "chi-square " << stat << " with " << dof << " degrees of freedom");
  }
}

#endif  // TANDEM_WITH_CUDA

TEST_CASE("a padded vocabulary: ids past `vocab` in a wider row are never drawn, however large their logits") {
  // Rows are the model's vocab_size wide (Qwen: 151936); the tokenizer has fewer ids, and
  // the caller passes that count as `vocab`. The padding holds the largest logits here.
  // The run's seed (TANDEM_TEST_SEED replays it), so that runs compare bit for bit.
  auto rng = kernel_test_rng(303);
  std::normal_distribution<float> normal;
  SamplingRows s;
  s.vocab = 1000;
  s.stride = 1024;
  const int64_t rows = 256;
  s.logits.resize(static_cast<size_t>(rows * s.stride));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < s.stride; ++i) s.logits[r * s.stride + i] = i < s.vocab ? normal(rng) : 40.0f + normal(rng);
    const int64_t kind = r % 4;  // plain, greedy, top-k, top-p
    s.add(kind == 1 ? 0.0f : 1.5f, kind == 2 ? 20 : 0, kind == 3 ? 0.9f : 1.0f, rng(), r);
  }
  s.run();
  for (int64_t r = 0; r < rows; ++r) {
    INFO("row " << r);
    REQUIRE(s.tokens[r] >= 0);
    CHECK(s.tokens[r] < s.vocab);
    if (r % 4 == 1) CHECK(s.tokens[r] == s.reference(r).token);  // greedy: the argmax among the real ids
    CHECK(std::isfinite(s.logprobs[r]));
  }
}
