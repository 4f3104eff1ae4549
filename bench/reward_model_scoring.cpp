// bench/reward_model_scoring: what a reward-model worker scores per second (the rollout
// engine's CPU backend with the classifier's head, prefill only: rollout/sequence_scorer.h)
// against the in-controller scorer's libtorch forward (controller/run/model_reward.cpp's
// computation: PolicyModel's trunk, final norm, last token through score.weight) on the
// same model, sequences and threads, in the same run. Also prints the largest score
// difference between the two (float32 both).
//
// Prints one JSON line per implementation (median, min and max of the timed repeats) and
// the ratio line. `reward_model_scoring --help` for the options.
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/policy_torch.h"
#include "actor/presets.h"
#include "core/error.h"
#include "core/math_environment.h"
#include "rollout/sequence_scorer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage = R"(reward_model_scoring: a reward-model worker's scoring against the in-controller libtorch forward.

Options (defaults in brackets):
  --model M        model directory or builtin:PRESET, made a one-label classifier with a random head [builtin:small]
  --threads N      threads of each side [2]
  --sequences N    sequences scored per call [256]
  --tokens N       tokens per sequence (prompt and response) [80]
  --batch N        sequences per forward of each side (reward.N.batch_size) [32]
  --repeats N      timed calls of each side (one untimed first) [5]
  --help           this text
)";

struct Args {
  std::string model = "builtin:small";
  int threads = 2;
  int sequences = 256;
  int tokens = 80;
  int batch = 32;
  int repeats = 5;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value", flag));
    const std::string value = argv[++i];
    if (flag == "--model") a.model = value;
    else if (flag == "--threads") a.threads = std::stoi(value);
    else if (flag == "--sequences") a.sequences = std::stoi(value);
    else if (flag == "--tokens") a.tokens = std::stoi(value);
    else if (flag == "--batch") a.batch = std::stoi(value);
    else if (flag == "--repeats") a.repeats = std::stoi(value);
    else throw UsageError(fmt::format("unknown option {} (--help lists them)", flag));
  }
  return a;
}

struct Timing {
  double median = 0, min = 0, max = 0;
};

template <typename F>
Timing time_calls(int repeats, F&& call) {
  call();  // untimed: first-touch of buffers and thread pools
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    call();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return {seconds[seconds.size() / 2], seconds.front(), seconds.back()};
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_math_environment(argv);  // the environment tandem's processes run with, both sides
  try {
    const Args a = parse(argc, argv);
    const std::string dir = resolve_model_path(a.model);
    ModelConfig config = read_model_config(dir + "/config.json");
    ModelConfig classifier = config;
    classifier.num_labels = 1;
    // The trunk's weights, and a random head N(0, 0.02^2) as score.weight.
    std::vector<WeightTensor> tensors;
    const ModelWeights causal = load_model_weights(dir, config);
    for (const WeightTensor& t : causal.tensors()) {
      if (t.name != "lm_head.weight") tensors.push_back(t);
    }
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    WeightTensor score{"score.weight", {1, config.hidden_size}, {}};
    for (int64_t i = 0; i < config.hidden_size; ++i) score.data.push_back(normal(rng));
    tensors.push_back(score);
    const ModelWeights weights(std::move(tensors));

    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(config.vocab_size - 1));
    std::vector<std::vector<int32_t>> sequences(static_cast<size_t>(a.sequences));
    std::vector<int32_t> flat;
    std::vector<uint32_t> lengths;
    for (auto& s : sequences) {
      for (int t = 0; t < a.tokens; ++t) s.push_back(id(rng));
      flat.insert(flat.end(), s.begin(), s.end());
      lengths.push_back(static_cast<uint32_t>(s.size()));
    }
    const double tokens = static_cast<double>(flat.size());

    // The worker's scorer, as reward_model_init builds it.
    ScoringLimits limits;
    limits.max_sequence_tokens = a.tokens;
    limits.pass_tokens = 2048;  // rollout.max_batch_tokens' default
    limits.pass_sequences = a.batch;
    EngineOptions base;
    base.threads = a.threads;
    const EngineOptions options = scoring_engine_options(classifier, limits, base);
    SequenceScorer worker(make_model_backend(classifier, weights, options), options, limits);
    std::vector<float> worker_scores;
    const Timing worker_time = time_calls(a.repeats, [&] { worker_scores = worker.score(flat, lengths); });

    // The in-controller scorer's computation.
    at::set_num_threads(a.threads);
    std::vector<WeightTensor> trunk;
    for (const WeightTensor& t : weights.tensors()) {
      if (t.name != "score.weight") trunk.push_back(t);
    }
    if (!config.tie_word_embeddings) {
      WeightTensor head{"lm_head.weight", {config.vocab_size, config.hidden_size}, {}};
      head.data.assign(static_cast<size_t>(head.numel()), 0.0f);
      trunk.push_back(std::move(head));
    }
    const PolicyModel model(config, ModelWeights(std::move(trunk)), at::kFloat);
    const at::Tensor head = at::tensor(score.data, at::kFloat).view({1, config.hidden_size});
    std::vector<float> torch_scores(sequences.size());
    const Timing torch_time = time_calls(a.repeats, [&] {
      c10::InferenceMode guard;
      for (size_t begin = 0; begin < sequences.size(); begin += static_cast<size_t>(a.batch)) {
        const size_t end = std::min(sequences.size(), begin + static_cast<size_t>(a.batch));
        const std::vector<std::vector<int32_t>> part(sequences.begin() + begin, sequences.begin() + end);
        const TokenLayout layout = padded_layout(part);
        const at::Tensor normed = model.final_norm(model.trunk(layout));
        const at::Tensor last = layout.segment_ids.gt(0).sum(1).sub(1).clamp_min(0);
        const at::Tensor hidden = normed.index({at::arange(normed.size(0), last.options()), last}).to(at::kFloat);
        const at::Tensor s = at::linear(hidden, head).squeeze(-1).contiguous();
        std::memcpy(torch_scores.data() + begin, s.data_ptr<float>(), (end - begin) * sizeof(float));
      }
    });

    double largest_difference = 0;
    for (size_t i = 0; i < sequences.size(); ++i) {
      largest_difference = std::max(largest_difference, std::abs(static_cast<double>(worker_scores[i]) - torch_scores[i]));
    }
    const auto line = [&](const char* impl, const Timing& t) {
      nlohmann::json j = {{"bench", "reward_model_scoring"}, {"impl", impl}, {"model", a.model},
                          {"threads", a.threads}, {"sequences", a.sequences}, {"tokens_per_sequence", a.tokens},
                          {"batch", a.batch}, {"seconds_median", t.median}, {"seconds_min", t.min},
                          {"seconds_max", t.max}, {"tokens_per_s", tokens / t.median}};
      std::puts(j.dump().c_str());
    };
    line("tandem_worker_cpu", worker_time);
    line("libtorch_in_controller", torch_time);
    const nlohmann::json ratio = {{"bench", "reward_model_scoring"}, {"ratio", "worker_over_libtorch_tokens_per_s"},
                                  {"value", torch_time.median / worker_time.median},
                                  {"largest_score_difference", largest_difference}};
    std::puts(ratio.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reward_model_scoring: %s\n", e.what());
    return 2;
  }
}
