// bench/sampler_cpu: one row's draw with tandem's sampler (rollout/sampler.h) against
// libtorch doing the same on the same rows (what a PyTorch generation loop does: log-softmax
// for the log-prob, then multinomial; top-k through at::topk; top-p the way Hugging Face's
// warper does it, a full sort and a cumulative sum), on one thread each: the engine draws
// one row per thread (rollout/engine.cpp).
//
// Prints one JSON line per case: milliseconds per row (median of the repeats), nanoseconds
// per id, and the ratio torch / tandem (above 1: tandem is faster).
#include "rollout/sampler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

// The same draw in libtorch ops: the token and its full log-prob, as tandem's sampler reports.
SampledToken torch_draw(const at::Tensor& row, const SamplingParams& p) {
  if (p.temperature == 0) {
    const at::Tensor logprobs = at::log_softmax(row, 0);
    const int64_t token = logprobs.argmax().item<int64_t>();
    return {static_cast<int32_t>(token), logprobs[token].item<float>(), 0.0f};
  }
  const at::Tensor scaled = row / p.temperature;
  const at::Tensor logprobs = at::log_softmax(scaled, 0);  // the full distribution's log-probs
  at::Tensor values = scaled, ids;
  if (p.top_k > 0) {
    std::tie(values, ids) = at::topk(scaled, p.top_k);
  }
  if (p.top_p < 1) {
    at::Tensor sorted;
    if (p.top_k > 0) {
      sorted = values;  // topk returns them sorted
    } else {
      std::tie(sorted, ids) = at::sort(scaled, 0, /*descending=*/true);
    }
    const at::Tensor cumulative = at::softmax(sorted, 0).cumsum(0);
    // Keep the smallest prefix reaching top_p: drop an id once the mass before it does.
    const at::Tensor drop = (cumulative - at::softmax(sorted, 0)) >= p.top_p;
    values = sorted.masked_fill(drop, -INFINITY);
  }
  const at::Tensor pick = at::multinomial(at::softmax(values, 0), 1);
  const int64_t index = pick.item<int64_t>();
  const int64_t token = ids.defined() ? ids[index].item<int64_t>() : index;
  return {static_cast<int32_t>(token), logprobs[token].item<float>(), 0.0f};
}

template <typename F>
double median_ms(int repeats, int rows, F&& draw_rows) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    draw_rows();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count() / rows);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t vocab = 151936;
  int rows = 16, repeats = 7;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--vocab" && i + 1 < argc) {
      vocab = std::stoll(argv[++i]);
    } else if (arg == "--rows" && i + 1 < argc) {
      rows = std::stoi(argv[++i]);
    } else if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "sampler_cpu: tandem's sampler against libtorch on the same rows, one thread\n"
                   "  --vocab N    ids per row [151936]\n  --rows N     rows per repeat [16]\n"
                   "  --repeats N  repeats, the median reported [7]\n");
      return arg == "--help" ? 0 : 2;
    }
  }
  at::set_num_threads(1);
  struct Case {
    const char* name;
    SamplingParams params;
  };
  const std::vector<Case> cases = {{"greedy", {0.0, 0, 1.0}},          {"temperature_1", {1.0, 0, 1.0}},
                                   {"temperature_0.7", {0.7, 0, 1.0}}, {"top_k_50", {1.0, 50, 1.0}},
                                   {"top_p_0.9", {1.0, 0, 0.9}},       {"top_k_50_top_p_0.95", {1.0, 50, 0.95}}};
  std::mt19937_64 rng(12345);
  for (const float spread : {2.0f, 5.0f}) {  // a flat row, and one where a few hundred ids hold most mass
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> logits(static_cast<size_t>(vocab) * rows);
    for (float& l : logits) l = normal(rng);
    const at::Tensor all = at::from_blob(logits.data(), {rows, vocab}, at::kFloat);
    for (const Case& c : cases) {
      Sampler sampler;
      double checksum = 0;  // of the drawn log-probs, so neither side's work can be skipped
      uint64_t counter = 0;
      const double tandem_ms = median_ms(repeats, rows, [&] {
        for (int r = 0; r < rows; ++r)
          checksum += sampler.sample(&logits[static_cast<size_t>(r) * vocab], vocab, c.params,
                                     uniform_from_counter(7, counter++)).logprob;
      });
      const double torch_ms = median_ms(repeats, rows, [&] {
        for (int r = 0; r < rows; ++r) checksum += torch_draw(all[r], c.params).logprob;
      });
      nlohmann::json line = {{"bench", "sampler_cpu"},
                             {"case", c.name},
                             {"logit_sd", spread},
                             {"vocab", vocab},
                             {"tandem_ms_per_row", tandem_ms},
                             {"tandem_ns_per_id", tandem_ms * 1e6 / static_cast<double>(vocab)},
                             {"torch_ms_per_row", torch_ms},
                             {"ratio_torch_over_tandem", torch_ms / tandem_ms},
                             {"checksum", checksum}};
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
