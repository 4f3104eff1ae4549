// bench/rollout_cpu: generation throughput of the rollout engine's CPU backend against
// plain libtorch loops (no KV cache; a simple growing KV cache) on the same weights in
// the same run, for the tiny and small presets at several batch sizes. Also times the
// backend's matrix product (Eigen, split over our pool) against at::linear, the choice
// between Eigen and libtorch ops the engine is built on.
//
// Prints one JSON line per measurement and one per (preset, batch) with the ratios.
// Usage: rollout_cpu [--presets tiny,small] [--batches 1,8,64] [--prompt-tokens 16]
//                    [--new-tokens 32] [--threads 0] [--repeats 3]
#include "actor/policy_torch.h"
#include "actor/presets.h"
#include "core/text.h"
#include "rollout/cpu_ops.h"
#include "rollout/engine.h"
#include "rollout/thread_pool.h"
#include "torch_generate.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::vector<std::string> presets = {"tiny", "small"};
  std::vector<int64_t> batches = {1, 8, 64};
  int64_t prompt_tokens = 16;
  int64_t new_tokens = 32;
  int threads = 0;
  int repeats = 3;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i], value = argv[i + 1];
    if (key == "--presets") a.presets = split(value, ',');
    else if (key == "--batches") {
      a.batches.clear();
      for (const std::string& b : split(value, ',')) a.batches.push_back(std::stoll(b));
    } else if (key == "--prompt-tokens") a.prompt_tokens = std::stoll(value);
    else if (key == "--new-tokens") a.new_tokens = std::stoll(value);
    else if (key == "--threads") a.threads = std::stoi(value);
    else if (key == "--repeats") a.repeats = std::stoi(value);
    else throw std::runtime_error("unknown option " + key);
  }
  return a;
}

// Best of `repeats` wall times: the least disturbed run on a shared machine.
template <class Fn>
double best_seconds(int repeats, Fn fn) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

void bench_linear(ThreadPool& pool, int repeats) {
  // The small preset's MLP up-projection: [batch, 256] x [768, 256]^T.
  const int64_t in = 256, out = 768;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> w(out * in);
  for (float& v : w) v = normal(rng);
  at::Tensor w_t = at::from_blob(w.data(), {out, in}, at::kFloat);
  for (int64_t rows : {1, 8, 64, 512}) {
    std::vector<float> x(rows * in), y(rows * out);
    for (float& v : x) v = normal(rng);
    at::Tensor x_t = at::from_blob(x.data(), {rows, in}, at::kFloat);
    const int calls = static_cast<int>(std::max<int64_t>(20, 20000 / rows));
    double ours = best_seconds(repeats, [&] {
      for (int i = 0; i < calls; ++i) cpu::linear(pool, x.data(), rows, in, w.data(), nullptr, out, y.data());
    }) / calls;
    double torch = best_seconds(repeats, [&] {
      c10::InferenceMode guard;
      for (int i = 0; i < calls; ++i) at::linear(x_t, w_t);
    }) / calls;
    const double flops = 2.0 * rows * in * out;
    fmt::print("{{\"bench\":\"rollout_cpu\",\"op\":\"linear\",\"rows\":{},\"in\":{},\"out\":{},\"eigen_us\":{:.2f},"
               "\"torch_us\":{:.2f},\"eigen_gflops\":{:.2f},\"torch_gflops\":{:.2f},\"speedup_vs_torch\":{:.2f}}}\n",
               rows, in, out, ours * 1e6, torch * 1e6, flops / ours / 1e9, flops / torch / 1e9, torch / ours);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  const int threads = args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(threads);
  ThreadPool pool(threads);
  fmt::print("{{\"bench\":\"rollout_cpu\",\"threads\":{},\"torch_threads\":{},\"prompt_tokens\":{},\"new_tokens\":{}}}\n",
             threads, at::get_num_threads(), args.prompt_tokens, args.new_tokens);
  bench_linear(pool, args.repeats);

  for (const std::string& preset : args.presets) {
    const ModelConfig config = model_preset_config(preset);
    const ModelWeights weights = random_model_weights(config, 1);
    PolicyModel torch_model(config, weights, at::kFloat);
    EngineOptions options;
    options.threads = threads;
    RolloutEngine engine(config, weights, options);
    std::mt19937_64 rng(7);
    for (int64_t batch : args.batches) {
      std::vector<std::vector<int32_t>> prompts(batch);
      std::vector<GenerationRequest> requests;
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t t = 0; t < args.prompt_tokens; ++t) prompts[b].push_back(static_cast<int32_t>(rng() % 256));
        GenerationRequest r;
        r.id = static_cast<uint64_t>(b);
        r.prompt = prompts[b];
        r.max_new_tokens = args.new_tokens;
        r.ignore_eos = true;  // every sample runs the full length, as in the baselines
        r.seed = static_cast<uint64_t>(b);
        requests.push_back(r);
      }
      const double tokens = static_cast<double>(batch * args.new_tokens);
      engine.generate(requests);  // warm-up: workspaces, page faults
      const double engine_s = best_seconds(args.repeats, [&] { engine.generate(requests); });
      const double kv_s = best_seconds(args.repeats, [&] { bench::torch_generate_kv_cache(torch_model, prompts, args.new_tokens, 1); });
      const double no_cache_s = best_seconds(std::min(args.repeats, 2), [&] {
        bench::torch_generate_no_cache(torch_model, prompts, args.new_tokens, 1);
      });
      // Same math, same generator: the two baselines must draw the same tokens.
      const bool baselines_agree = bench::torch_generate_kv_cache(torch_model, prompts, 8, 3) ==
                                   bench::torch_generate_no_cache(torch_model, prompts, 8, 3);
      for (auto [name, seconds] : {std::pair<const char*, double>{"tandem_engine", engine_s},
                                   {"torch_kv_cache", kv_s}, {"torch_no_cache", no_cache_s}}) {
        fmt::print("{{\"bench\":\"rollout_cpu\",\"preset\":\"{}\",\"batch\":{},\"impl\":\"{}\",\"seconds\":{:.4f},"
                   "\"tokens_per_s\":{:.1f}}}\n",
                   preset, batch, name, seconds, tokens / seconds);
      }
      fmt::print("{{\"bench\":\"rollout_cpu\",\"preset\":\"{}\",\"batch\":{},\"ratio_vs_torch_kv_cache\":{:.2f},"
                 "\"ratio_vs_torch_no_cache\":{:.2f},\"baselines_agree\":{}}}\n",
                 preset, batch, kv_s / engine_s, no_cache_s / engine_s, baselines_agree ? "true" : "false");
      std::fflush(stdout);
    }
  }
  return 0;
}
