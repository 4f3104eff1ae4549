// bench/learner_cpu: the learner's training tokens/s (tandem's Trainer, one rank) against
// eager PyTorch (bench/torch_grpo.py --train-only, Debian's python3-torch: the same
// libtorch 1.13 and OpenBLAS) on the same model, micro-batches and threads in the same
// run; with --ranks also 2 ranks over Gloo with ddp, zero2 and fsdp, each rank a separate
// process (this binary re-executed with --rank) reporting its own peak RSS; with
// --tensor-parallel T also the model split over T such processes (learner.tensor_parallel,
// sequence parallel), against the one-rank run: tokens/s and each rank's peak RSS; with
// --lora R also rank-R adapters on every projection (learner.lora) against full
// fine-tuning, each in a process of its own: tokens/s and peak RSS.
//
// Prints one JSON line per configuration (per-step times: median, min, max) and the
// ratio line. `learner_cpu --help` for the options.
//
// Model FLOP utilisation (the one-rank and PyTorch lines' "mfu"): the step's model FLOPs
// over its time, over the machine's matrix-product peak measured in the same run with the
// same threads and precision (`peak_gflops`: the best of 20 2048 x 2048 products each
// through at::mm, libtorch's own path (OpenBLAS for fp32, oneDNN for bf16), and through
// oneDNN directly, as the learner multiplies; raised to the fastest of the step's own
// products timed alone where one of those is faster, as small float32 products that stay in
// cache were on a Zen 5 EPYC: a peak below what the machine does would overstate the MFU).
// Model FLOPs per step, PaLM's count: every
// processed token (prompt and response) costs 6 x the parameters that multiply it (the layer
// projections and the LM head; embeddings are lookups) plus 12 x layers x heads x head_dim x
// its sequence length for attention (forward and backward, causality not discounted).
// `products_alone_mfu`: the same FLOPs over the time the step's matrix products take timed
// alone (products_alone_seconds): the MFU the products' own efficiency at these shapes
// allows; the gap to `mfu` is the rest of the step.
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/onednn_matmul.h"
#include "actor/presets.h"
#include "core/error.h"
#include "core/files.h"
#include "core/heap_reuse.h"
#include "core/math_environment.h"
#include "core/process.h"
#include "core/text.h"
#include "learner/collectives.h"
#include "learner/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <cstdio>
#include <random>
#include <sstream>
#include <thread>

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage = R"(learner_cpu: tandem's learner against eager PyTorch on the same micro-batches.

Options (defaults in brackets):
  --model M            model directory, .gguf, llama2.c .bin or builtin:PRESET [builtin:small]
  --threads N          intra-op threads of each side [2]
  --samples N          samples per optimizer step [128]
  --prompt-tokens N    prompt tokens per sample [4]
  --response-tokens N  response tokens per sample [16]
  --micro-batch N      samples per forward/backward [32]
  --precision P        fp32 | bf16: compute dtype of both sides (learner.precision; PyTorch: CPU autocast) [fp32]
  --steps N            measured optimizer steps [5]
  --warmup N           optimizer steps run first, not measured [1]
  --python PATH        the Python with torch for the reference [/usr/bin/python3]
  --no-torch           skip the PyTorch reference
  --ranks              also 2 ranks with ddp, zero2 and fsdp (separate processes over Gloo)
  --tensor-parallel T  also the model split over T ranks (separate processes over Gloo, sequence parallel)
  --lora R             also LoRA rank R (alpha 2R, all-linear) against full fine-tuning, one process each
  --profile N          after the measured steps, one more under libtorch's profiler: the N ops with the
                       most self time, one JSON line each (share of the step, calls) [0: none]
  --help               this text
)";

struct Args {
  std::string model = "builtin:small";
  int threads = 2;
  int samples = 128;
  int prompt_tokens = 4;
  int response_tokens = 16;
  int micro_batch = 32;
  int steps = 5;
  int warmup = 1;
  std::string python = "/usr/bin/python3";
  bool torch = true;
  bool ranks = false;
  // rank mode (internal)
  int rank = -1, world = 1;
  std::string rendezvous, sharding = "ddp";
  int tensor_parallel = 1;
  int lora_rank = 0;
  std::string precision = "fp32";
  int profile = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (key == "--no-torch") {
      a.torch = false;
      continue;
    }
    if (key == "--ranks") {
      a.ranks = true;
      continue;
    }
    if (i + 1 >= argc) throw std::runtime_error(key + " needs a value (learner_cpu --help)");
    const std::string value = argv[++i];
    if (key == "--model") a.model = value;
    else if (key == "--threads") a.threads = std::stoi(value);
    else if (key == "--samples") a.samples = std::stoi(value);
    else if (key == "--prompt-tokens") a.prompt_tokens = std::stoi(value);
    else if (key == "--response-tokens") a.response_tokens = std::stoi(value);
    else if (key == "--micro-batch") a.micro_batch = std::stoi(value);
    else if (key == "--steps") a.steps = std::stoi(value);
    else if (key == "--warmup") a.warmup = std::stoi(value);
    else if (key == "--python") a.python = value;
    else if (key == "--rank") a.rank = std::stoi(value);
    else if (key == "--world") a.world = std::stoi(value);
    else if (key == "--rendezvous") a.rendezvous = value;
    else if (key == "--sharding") a.sharding = value;
    else if (key == "--precision") a.precision = value;
    else if (key == "--tensor-parallel") a.tensor_parallel = std::stoi(value);
    else if (key == "--lora") a.lora_rank = std::stoi(value);
    else if (key == "--profile") a.profile = std::stoi(value);
    else throw std::runtime_error("unknown option " + key + " (learner_cpu --help)");
  }
  return a;
}

void print(const nlohmann::json& line);

// The machine's matrix-product peak for `precision` on the current intra-op threads.
double measured_peak_gflops(const std::string& precision) {
  const int64_t n = 2048;
  const at::ScalarType dtype = precision == "bf16" ? at::kBFloat16 : at::kFloat;
  const at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  // Both libtorch's own path and oneDNN's: on a Zen 5 EPYC OpenBLAS's float32 product
  // reached 207 GFLOP/s where oneDNN's (the learner's) ran at twice that, and a peak below
  // what the learner itself reaches would report an MFU above 1.
  at::Tensor c;
  const at::Tensor out = at::empty({n, n}, at::kFloat);  // oneDNN writes float32 results
  std::vector<std::function<void()>> products{[&] { c = at::mm(a, b); }};
  if (onednn_available()) products.emplace_back([&] { onednn_matmul(a, b, out); });
  for (const auto& product : products) product();  // first calls: allocation and any lazy setup
  // The best of 20 products in four rounds half a second apart: on a shared VM a neighbour's
  // burst can slow every product of one round (a bf16 peak of 210 GFLOP/s where the
  // machine does 410), and a low peak would overstate the MFU.
  double best = 0;
  for (int round = 0; round < 4; ++round) {
    if (round > 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    for (int rep = 0; rep < 5; ++rep) {
      for (const auto& product : products) {
        const auto start = Clock::now();
        product();
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        best = std::max(best, 2.0 * n * n * n / seconds / 1e9);
      }
    }
  }
  return best;
}

struct ProductsAlone {
  double seconds = 0;       // 0 without oneDNN
  double best_gflops = 0;   // the fastest single product's rate
};

// How long one optimizer step's matrix products take alone: every linear layer's forward,
// input-gradient and weight-gradient products of one micro-batch, with the learner's
// operand layouts (actor/fused_linear.cpp) and precision, each timed back to back through
// onednn_matmul on operands of its own (the best of 3 rounds of 5), summed over the layers
// and micro-batches; the LM head as one product each way over the response positions (the
// learner tiles it). Model FLOPs over this time is the MFU of a step that did nothing but
// these products: what the products' own efficiency at these shapes allows, against what
// the rest of the step costs.
ProductsAlone products_alone(const ModelConfig& c, const Args& a) {
  ProductsAlone result;
  if (!onednn_available()) return result;
  const at::ScalarType dtype = a.precision == "bf16" ? at::kBFloat16 : at::kFloat;
  const int64_t micro = std::min(a.micro_batch, a.samples);
  const int64_t rows = micro * (a.prompt_tokens + a.response_tokens), head_rows = micro * a.response_tokens;
  auto timed = [&](int64_t m, int64_t k, int64_t n, bool accumulate_dx) {
    const at::Tensor x = at::randn({m, k}).to(dtype), w = at::randn({n, k}).to(dtype), dy = at::randn({m, n}).to(dtype);
    const at::Tensor y = at::empty({m, n}), dx = at::zeros({m, k}), dw = at::zeros({n, k});
    const std::vector<std::function<void()>> products{[&] { onednn_matmul(x, w.t(), y); },
                                                      [&] { onednn_matmul(dy, w, dx, accumulate_dx); },
                                                      [&] { onednn_matmul(dy.t(), x, dw, /*accumulate=*/true); }};
    double total = 0;
    for (const auto& product : products) {
      product();  // the primitive's JIT compile
      double best = INFINITY;
      for (int round = 0; round < 3; ++round) {
        const auto start = Clock::now();
        for (int rep = 0; rep < 5; ++rep) product();
        best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count() / 5);
      }
      total += best;
      const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
      result.best_gflops = std::max(result.best_gflops, flops / best / 1e9);
    }
    return total;
  };
  const int64_t hidden = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  // q, k, v share their input (k's and v's input gradients add into q's), as gate and up do.
  const double layer = timed(rows, hidden, q, false) + 2 * timed(rows, hidden, kv, true) + timed(rows, q, hidden, false) +
                       timed(rows, hidden, inter, false) + timed(rows, hidden, inter, true) +
                       timed(rows, inter, hidden, false);
  const double head = timed(head_rows, hidden, c.sampled_vocab(), true);
  const double micro_batches = std::ceil(static_cast<double>(a.samples) / static_cast<double>(micro));
  result.seconds = micro_batches * (static_cast<double>(c.num_hidden_layers) * layer + head);
  return result;
}

// Model FLOPs of one optimizer step (see the top of this file).
double model_flops_per_step(const ModelConfig& c, const Args& a) {
  const double hidden = static_cast<double>(c.hidden_size);
  const double per_layer = hidden * static_cast<double>(c.q_size() + 2 * c.kv_size()) +  // q, k, v
                           static_cast<double>(c.q_size()) * hidden +                      // o
                           3.0 * hidden * static_cast<double>(c.intermediate_size);        // gate, up, down
  const double multiplied = per_layer * static_cast<double>(c.num_hidden_layers) +
                            hidden * static_cast<double>(c.sampled_vocab());  // the LM head
  const double length = a.prompt_tokens + a.response_tokens;
  const double tokens = static_cast<double>(a.samples) * length;
  const double attention = 12.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads * c.head_dim) * length;
  return tokens * (6.0 * multiplied + attention);
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

std::vector<TrainingSample> synthetic_batch(const Args& a, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TrainingSample> batch(static_cast<size_t>(a.samples));
  for (TrainingSample& s : batch) {
    for (int i = 0; i < a.prompt_tokens; ++i) s.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    const float advantage = (rng() % 2) ? 1.0f : -1.0f;
    for (int i = 0; i < a.response_tokens; ++i) {
      s.response.push_back(static_cast<int32_t>(rng() % vocab));
      s.old_logprobs.push_back(-5.5f);
      s.advantages.push_back(advantage);
    }
  }
  return batch;
}

TrainerOptions trainer_options(const Args& a) {
  TrainerOptions o;
  o.learner.sharding = a.sharding;
  o.learner.precision = a.precision;
  o.learner.tensor_parallel = a.tensor_parallel;
  o.learner.lora.rank = a.lora_rank;
  o.learner.lora.alpha = 2.0 * a.lora_rank;
  o.learner.micro_batch_size = std::max(1, a.micro_batch / (a.world / a.tensor_parallel));
  o.learner.optimizer.lr = 1e-3;
  o.learner.optimizer.weight_decay = 0.0;
  o.algorithm.kl.coef = 0;  // no reference model: the PyTorch loop has none either
  o.max_response_length = a.response_tokens;
  o.total_optimizer_steps = 1000;
  return o;
}

struct Spread {
  double median = 0, min = 0, max = 0;
};

Spread spread(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return {median, values.front(), values.back()};
}

// Runs `step` under libtorch's legacy profiler and prints the `top` ops by self time (an
// op's time less its children's), each with its share of the profiled wall time.
void profile_step(const std::function<void()>& step, int top, const Args& a) {
  namespace prof = torch::autograd::profiler;
  prof::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
  const auto start = Clock::now();
  step();
  const double wall_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  const prof::thread_event_lists events = prof::disableProfilerLegacy();
  struct Open {
    std::string name;
    double start_us = 0, children_us = 0;
  };
  std::map<std::string, std::pair<double, int64_t>> self;  // name -> (self us, calls)
  for (const auto& thread : events) {
    std::vector<Open> stack;
    for (const prof::LegacyEvent& e : thread) {
      const std::string kind = e.kindStr();
      if (kind == "push") {
        stack.push_back({e.name(), e.cpuUs(), 0});
      } else if (kind == "pop" && !stack.empty()) {
        const Open open = stack.back();
        stack.pop_back();
        const double took = e.cpuUs() - open.start_us;
        auto& entry = self[open.name];
        entry.first += took - open.children_us;
        entry.second += 1;
        if (!stack.empty()) stack.back().children_us += took;
      }
    }
  }
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> ranked(self.begin(), self.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.second.first > y.second.first; });
  for (int i = 0; i < top && i < static_cast<int>(ranked.size()); ++i) {
    print({{"bench", "learner_cpu"}, {"profile", ranked[i].first}, {"precision", a.precision}, {"model", a.model},
           {"self_ms", ranked[i].second.first / 1e3}, {"share_of_step", ranked[i].second.first / wall_us},
           {"calls", ranked[i].second.second}});
  }
}

// One rank's loop: its JSON line. world 1 runs in this process.
nlohmann::json run_rank(const Args& a, const std::string& model_dir) {
  at::set_num_threads(std::max(1, a.threads / a.world));
  const ModelConfig config = read_model_config(model_dir + "/config.json");
  const ModelWeights weights = load_model_weights(model_dir, config);
  auto collectives = Collectives::create({a.rendezvous, std::max(0, a.rank), a.world, 300.0});
  Trainer trainer(config, weights, trainer_options(a), *collectives);
  const std::vector<TrainingSample> global = synthetic_batch(a, config.sampled_vocab(), 3);
  const int rank = std::max(0, a.rank);
  // The tensor-parallel ranks of a replica train on the same share.
  const int replica = rank / a.tensor_parallel, replicas = a.world / a.tensor_parallel;
  const size_t begin = global.size() * replica / replicas, end = global.size() * (replica + 1) / replicas;
  const std::vector<std::vector<TrainingSample>> share = {{global.begin() + begin, global.begin() + end}};
  for (int i = 0; i < a.warmup; ++i) trainer.train(share);
  std::vector<double> seconds;
  for (int step = 0; step < a.steps; ++step) {
    collectives->barrier();
    const auto start = Clock::now();
    trainer.train(share);
    collectives->barrier();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (a.profile > 0 && rank == 0) profile_step([&] { trainer.train(share); }, a.profile, a);
  const Spread s = spread(seconds);
  const double tokens = static_cast<double>(a.samples) * a.response_tokens;
  const double model_gflops = model_flops_per_step(config, a) / 1e9;
  nlohmann::json line = {{"bench", "learner_cpu"}, {"impl", "tandem_trainer"}, {"model", a.model},
                         {"rank", rank},           {"world", a.world},         {"sharding", a.sharding},
                         {"tensor_parallel", a.tensor_parallel}, {"lora_rank", a.lora_rank},
                         {"threads", a.threads},   {"samples", a.samples},     {"micro_batch", a.micro_batch}, {"precision", a.precision},
                         {"median_step_s", s.median}, {"min_step_s", s.min}, {"max_step_s", s.max},
                         {"train_tokens_per_s", tokens / s.median}, {"peak_rss_mb", peak_rss_mb()},
                         {"parameters", weights.parameter_count()}, {"model_gflops_per_step", model_gflops},
                         {"achieved_gflops", model_gflops / s.median}};
  return line;
}

void print(const nlohmann::json& line) {
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

// bench/torch_grpo.py --train-only on the same model and shapes: its summary line.
nlohmann::json torch_reference(const Args& a, const std::string& model_dir) {
  TempDir dir;
  const std::string out = dir.path() + "/torch.out";
  const int group = 8;  // torch_grpo makes prompts x group_size samples
  TANDEM_CHECK(a.samples % group == 0, "--samples must be a multiple of {} for the PyTorch reference", group);
  ChildProcess child = ChildProcess::spawn(
      {a.python, std::string(TANDEM_SOURCE_DIR) + "/bench/torch_grpo.py", "--train-only", "--model", model_dir,
       "--threads", std::to_string(a.threads), "--prompts", std::to_string(a.samples / group), "--group-size",
       std::to_string(group), "--prompt-len", std::to_string(a.prompt_tokens), "--new-tokens",
       std::to_string(a.response_tokens), "--micro-batch", std::to_string(a.micro_batch), "--steps",
       std::to_string(a.steps), "--warmup", std::to_string(a.warmup), "--precision", a.precision},
      {out, false});
  const auto status = child.wait_for(3600);
  const std::string text = read_file(out).value_or("");
  if (!status || !status->success()) throw std::runtime_error("torch_grpo.py failed: " + text);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{", 0) == 0 && line.find("\"summary\": true") != std::string::npos) return nlohmann::json::parse(line);
  }
  throw std::runtime_error("torch_grpo.py printed no summary: " + text);
}

int free_port(int attempt) {
  // Port 0 is not allowed for a TCPStore server here; derive one from the pid instead.
  return 20000 + static_cast<int>(::getpid() % 20000) + attempt;
}

std::vector<nlohmann::json> run_ranks(const char* self, const Args& a, const std::string& model_dir, int world,
                                      const std::string& sharding, int attempt) {
  TempDir dir;
  const std::string rendezvous = fmt::format("tcp://127.0.0.1:{}", free_port(attempt));
  std::vector<ChildProcess> children;
  for (int r = 0; r < world; ++r) {
    children.push_back(ChildProcess::spawn(
        {self, "--rank", std::to_string(r), "--world", std::to_string(world), "--rendezvous", rendezvous,
         "--sharding", sharding, "--model", model_dir, "--steps", std::to_string(a.steps), "--warmup",
         std::to_string(a.warmup), "--samples", std::to_string(a.samples), "--prompt-tokens",
         std::to_string(a.prompt_tokens), "--response-tokens", std::to_string(a.response_tokens), "--micro-batch",
         std::to_string(a.micro_batch), "--threads", std::to_string(a.threads), "--precision", a.precision,
         "--tensor-parallel", std::to_string(a.tensor_parallel), "--lora", std::to_string(a.lora_rank)},
        {dir.path() + "/rank" + std::to_string(r) + ".out", false}));
  }
  std::vector<nlohmann::json> out;
  for (int r = 0; r < world; ++r) {
    auto status = children[r].wait_for(1800);
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
  // The environment tandem's learner workers run with on a synchronous run
  // (core/math_environment.h: they compute alone), for this process and its ranks. The
  // PyTorch reference gets the same OpenBLAS kernels but libgomp's default waiting.
  reexec_with_math_environment(argv, /*computes_alone=*/true);
  keep_freed_memory_for_reuse();  // as in tandem's workers (core/heap_reuse.h)
  const Args a = parse(argc, argv);
  const std::string model_dir = resolve_model_path(a.model);
  if (a.rank >= 0) {
    print(run_rank(a, model_dir));
    return 0;
  }

  Args one_rank = a;
  one_rank.tensor_parallel = 1;
  one_rank.lora_rank = 0;
  nlohmann::json tandem = run_rank(one_rank, model_dir);  // one rank, in this process
  // Same threads (run_rank set them), same precision.
  const double square_peak = measured_peak_gflops(a.precision);
  const ProductsAlone alone = products_alone(read_model_config(model_dir + "/config.json"), a);
  const double peak = std::max(square_peak, alone.best_gflops);
  const double goal_mfu = 0.6;
  tandem["square_peak_gflops"] = square_peak;
  tandem["peak_gflops"] = peak;
  tandem["mfu"] = tandem.at("achieved_gflops").get<double>() / peak;
  tandem["mfu_goal"] = goal_mfu;
  if (alone.seconds > 0) {
    tandem["products_alone_s"] = alone.seconds;
    tandem["products_alone_mfu"] = tandem.at("model_gflops_per_step").get<double>() / alone.seconds / peak;
  }
  print(tandem);
  if (a.torch) {
    const std::vector<std::string> ours = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"};
    std::vector<std::optional<std::string>> saved;
    for (const std::string& name : ours) {
      const char* value = std::getenv(name.c_str());
      saved.push_back(value ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name.c_str());
    }
    nlohmann::json reference = torch_reference(a, model_dir);
    for (size_t i = 0; i < ours.size(); ++i) {
      if (saved[i]) ::setenv(ours[i].c_str(), saved[i]->c_str(), 1);
    }
    reference["bench"] = "learner_cpu";
    reference["impl"] = "pytorch_eager";
    // The same model FLOPs per train token as tandem's step.
    const double flops_per_token = tandem.at("model_gflops_per_step").get<double>() /
                                   (static_cast<double>(a.samples) * a.response_tokens);
    reference["achieved_gflops"] = reference.at("train_tokens_per_s").get<double>() * flops_per_token;
    reference["mfu"] = reference.at("achieved_gflops").get<double>() / peak;
    print(reference);
    const double ratio = tandem.at("train_tokens_per_s").get<double>() / reference.at("train_tokens_per_s").get<double>();
    const double goal = 1.3;
    print({{"bench", "learner_cpu"}, {"ratio", "tandem_trainer / pytorch_eager train tokens/s"}, {"model", a.model},
           {"threads", a.threads}, {"precision", a.precision}, {"value", ratio}, {"goal", goal},
           {"meets_goal", ratio >= goal}, {"mfu", tandem.at("mfu")}, {"mfu_goal", goal_mfu},
           {"meets_mfu_goal", tandem.at("mfu").get<double>() >= goal_mfu}});
  }
  if (a.ranks) {
    int attempt = 0;
    for (const char* sharding : {"ddp", "zero2", "fsdp"}) {
      Args sharded = a;
      sharded.world = 2;
      for (const nlohmann::json& line : run_ranks(argv[0], sharded, model_dir, 2, sharding, attempt++)) print(line);
    }
  }
  if (a.tensor_parallel > 1) {
    Args split = a;
    split.world = a.tensor_parallel;
    double slowest = INFINITY, largest_rss = 0;
    for (const nlohmann::json& line : run_ranks(argv[0], split, model_dir, split.world, "ddp", 100)) {
      print(line);
      slowest = std::min(slowest, line.at("train_tokens_per_s").get<double>());
      largest_rss = std::max(largest_rss, line.at("peak_rss_mb").get<double>());
    }
    const double one_rank = tandem.at("train_tokens_per_s").get<double>();
    print({{"bench", "learner_cpu"},
           {"ratio", fmt::format("tensor_parallel {} ({} processes) / one rank train tokens/s", a.tensor_parallel,
                                 a.tensor_parallel)},
           {"model", a.model},
           {"threads", a.threads},
           {"precision", a.precision},
           {"value", slowest / one_rank},
           {"peak_rss_mb_per_rank", largest_rss},
           {"one_rank_peak_rss_mb", tandem.at("peak_rss_mb")},
           {"rss_ratio", largest_rss / tandem.at("peak_rss_mb").get<double>()}});
  }
  if (a.lora_rank > 0) {
    // Full fine-tuning and LoRA each in a fresh process, so that each peak RSS is its own.
    Args full = a, lora = a;
    full.tensor_parallel = lora.tensor_parallel = 1;
    full.lora_rank = 0;
    const nlohmann::json full_line = run_ranks(argv[0], full, model_dir, 1, "ddp", 200).at(0);
    const nlohmann::json lora_line = run_ranks(argv[0], lora, model_dir, 1, "ddp", 201).at(0);
    print(full_line);
    print(lora_line);
    print({{"bench", "learner_cpu"},
           {"ratio", fmt::format("LoRA rank {} / full fine-tuning train tokens/s", a.lora_rank)},
           {"model", a.model},
           {"threads", a.threads},
           {"precision", a.precision},
           {"value", lora_line.at("train_tokens_per_s").get<double>() / full_line.at("train_tokens_per_s").get<double>()},
           {"lora_peak_rss_mb", lora_line.at("peak_rss_mb")},
           {"full_peak_rss_mb", full_line.at("peak_rss_mb")},
           {"rss_ratio", lora_line.at("peak_rss_mb").get<double>() / full_line.at("peak_rss_mb").get<double>()}});
  }
  return 0;
}
