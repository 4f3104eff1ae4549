// bench/learner_cpu: training tokens/s and per-rank memory of the learner (Trainer over
// Gloo: 1 rank, and 2 ranks with ddp, zero2 and fsdp) on the small preset, against a plain
// single-process libtorch loop (PolicyModel + torch::optim::AdamW, same loss shape) of the
// same model and batch in the same run. Rank runs are separate processes (this binary
// re-executed with `--rank`), each reporting its own peak RSS and state bytes.
//
// Usage: learner_cpu [--steps 4] [--samples 16] [--prompt-tokens 16] [--response-tokens 32] [--threads N]
#include "actor/presets.h"
#include "core/files.h"
#include "core/process.h"
#include "core/text.h"
#include "learner/collectives.h"
#include "learner/trainer.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <torch/torch.h>

#include <chrono>
#include <random>
#include <sstream>

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int steps = 4;
  int samples = 16;  // per optimizer step, all ranks together
  int prompt_tokens = 16;
  int response_tokens = 32;
  int threads = 0;  // libtorch intra-op threads of the single-process runs; 0: all cores
  // rank mode
  int rank = -1, world = 1;
  std::string rendezvous, sharding = "ddp";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i], value = argv[i + 1];
    if (key == "--steps") a.steps = std::stoi(value);
    else if (key == "--samples") a.samples = std::stoi(value);
    else if (key == "--prompt-tokens") a.prompt_tokens = std::stoi(value);
    else if (key == "--response-tokens") a.response_tokens = std::stoi(value);
    else if (key == "--threads") a.threads = std::stoi(value);
    else if (key == "--rank") a.rank = std::stoi(value);
    else if (key == "--world") a.world = std::stoi(value);
    else if (key == "--rendezvous") a.rendezvous = value;
    else if (key == "--sharding") a.sharding = value;
    else throw std::runtime_error("unknown option " + key);
  }
  return a;
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

std::vector<TrainingSample> synthetic_batch(const Args& a, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TrainingSample> batch(a.samples);
  for (TrainingSample& s : batch) {
    for (int i = 0; i < a.prompt_tokens; ++i) s.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    for (int i = 0; i < a.response_tokens; ++i) {
      s.response.push_back(static_cast<int32_t>(rng() % vocab));
      s.old_logprobs.push_back(-5.5f);
      s.advantages.push_back((rng() % 2) ? 1.0f : -1.0f);
    }
  }
  return batch;
}

TrainerOptions trainer_options(const std::string& sharding) {
  TrainerOptions o;
  o.learner.sharding = sharding;
  o.learner.micro_batch_size = 4;
  o.learner.optimizer.lr = 1e-4;
  o.algorithm.kl.coef = 0;  // no reference model: the baseline has none either
  o.max_response_length = 32;
  o.total_optimizer_steps = 1000;
  return o;
}

int run_rank(const Args& a) {
  const int cores = a.threads > 0 ? a.threads : static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(std::max(1, cores / a.world));
  const ModelConfig config = model_preset_config("small");
  const ModelWeights weights = random_model_weights(config, 1);
  auto collectives = Collectives::create({a.rendezvous, a.rank, a.world, 300.0});
  Trainer trainer(config, weights, trainer_options(a.sharding), *collectives);
  const std::vector<TrainingSample> global = synthetic_batch(a, static_cast<int>(config.vocab_size), 3);
  const size_t begin = global.size() * a.rank / a.world, end = global.size() * (a.rank + 1) / a.world;
  const std::vector<std::vector<TrainingSample>> share = {{global.begin() + begin, global.begin() + end}};
  trainer.train(share);  // warm-up step
  collectives->barrier();
  auto start = Clock::now();
  int64_t tokens = 0;
  for (int step = 0; step < a.steps; ++step) tokens += trainer.train(share).tokens;
  collectives->barrier();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const int64_t params = weights.parameter_count();
  // At rest per rank: fsdp shards everything; zero2 the optimizer state (its gradient
  // buffer stays whole for the backward pass); ddp nothing.
  const bool fsdp = a.sharding == "fsdp";
  const double moments = a.sharding == "ddp" ? 2.0 * params : 2.0 * params / a.world;
  const double resident_params = fsdp ? 1.0 * params / a.world : 1.0 * params;
  fmt::print("{{\"rank\":{},\"world\":{},\"sharding\":\"{}\",\"tokens_per_s\":{:.1f},\"peak_rss_mb\":{:.1f},"
             "\"param_mb\":{:.2f},\"grad_mb\":{:.2f},\"optimizer_state_mb\":{:.2f}}}\n",
             a.rank, a.world, a.sharding, static_cast<double>(tokens) / seconds, peak_rss_mb(),
             resident_params * 4 / 1048576.0, resident_params * 4 / 1048576.0, moments * 4 / 1048576.0);
  return 0;
}

// The plain loop: one process, PolicyModel, PPO-clip token-mean loss in a few lines,
// torch::optim::AdamW. What a libtorch user would write first.
double plain_libtorch_tokens_per_s(const Args& a) {
  const ModelConfig config = model_preset_config("small");
  PolicyModel model(config, random_model_weights(config, 1), at::kFloat);
  torch::optim::AdamW optimizer(model.parameters(), torch::optim::AdamWOptions(1e-4).weight_decay(0.0));
  const std::vector<TrainingSample> batch = synthetic_batch(a, static_cast<int>(config.vocab_size), 3);
  auto step = [&] {
    optimizer.zero_grad();
    for (size_t begin = 0; begin < batch.size(); begin += 4) {
      std::vector<std::vector<int32_t>> sequences;
      for (size_t i = begin; i < begin + 4 && i < batch.size(); ++i) {
        std::vector<int32_t> s = batch[i].prompt;
        s.insert(s.end(), batch[i].response.begin(), batch[i].response.end());
        sequences.push_back(s);
      }
      TokenLayout layout = padded_layout(sequences);
      TokenLogProbs lp = token_logprobs(model.forward(layout), layout);
      at::Tensor response = lp.logprobs.narrow(1, a.prompt_tokens, a.response_tokens);
      at::Tensor ratio = (response + 5.5).exp();
      at::Tensor advantage = at::ones_like(ratio);
      at::Tensor loss = -at::min(ratio * advantage, ratio.clamp(0.8, 1.28) * advantage).sum() /
                        static_cast<double>(batch.size() * a.response_tokens);
      loss.backward();
    }
    torch::nn::utils::clip_grad_norm_(model.parameters(), 1.0);
    optimizer.step();
  };
  step();  // warm-up
  auto start = Clock::now();
  for (int i = 0; i < a.steps; ++i) step();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(a.steps) * a.samples * a.response_tokens / seconds;
}

int free_port() {
  // Port 0 is not allowed for a TCPStore server here; derive one from the pid instead.
  return 20000 + static_cast<int>(::getpid() % 20000);
}

std::vector<nlohmann::json> run_ranks(const char* self, const Args& a, int world, const std::string& sharding,
                                      int attempt) {
  TempDir dir;
  const std::string rendezvous = fmt::format("tcp://127.0.0.1:{}", free_port() + attempt);
  std::vector<ChildProcess> children;
  for (int r = 0; r < world; ++r) {
    children.push_back(ChildProcess::spawn(
        {self, "--rank", std::to_string(r), "--world", std::to_string(world), "--rendezvous", rendezvous, "--sharding",
         sharding, "--steps", std::to_string(a.steps), "--samples", std::to_string(a.samples), "--prompt-tokens",
         std::to_string(a.prompt_tokens), "--response-tokens", std::to_string(a.response_tokens), "--threads",
         std::to_string(a.threads)},
        {dir.path() + "/rank" + std::to_string(r) + ".out", false}));
  }
  std::vector<nlohmann::json> out;
  for (int r = 0; r < world; ++r) {
    auto status = children[r].wait_for(600);
    const std::string text = read_file(dir.path() + "/rank" + std::to_string(r) + ".out").value_or("");
    if (!status || !status->success()) throw std::runtime_error(fmt::format("rank {} failed: {}", r, text));
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
      if (!line.empty() && line[0] == '{') out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.rank >= 0) return run_rank(a);
  at::set_num_threads(a.threads > 0 ? a.threads : static_cast<int>(std::thread::hardware_concurrency()));
  const double baseline = plain_libtorch_tokens_per_s(a);
  fmt::print("{{\"bench\":\"learner_cpu\",\"impl\":\"plain_libtorch\",\"preset\":\"small\",\"tokens_per_s\":{:.1f},"
             "\"peak_rss_mb\":{:.1f}}}\n",
             baseline, peak_rss_mb());
  int attempt = 0;
  for (auto [world, sharding] : {std::pair<int, const char*>{1, "ddp"}, {2, "ddp"}, {2, "zero2"}, {2, "fsdp"}}) {
    for (const nlohmann::json& r : run_ranks(argv[0], a, world, sharding, attempt++)) {
      nlohmann::json line = r;
      line["bench"] = "learner_cpu";
      line["impl"] = "tandem_trainer";
      line["preset"] = "small";
      line["ratio_vs_plain_libtorch"] = r["tokens_per_s"].get<double>() / baseline;
      fmt::print("{}\n", line.dump());
    }
    std::fflush(stdout);
  }
  return 0;
}
