// bench/rollout_gpu: throughput of the rollout engine's CUDA backend on a Hugging Face
// model directory (config.json + safetensors; default builtin:small, a toy):
//   decode: requests of --prompt-len random tokens, ignore_eos, --new-tokens each, at each
//           --batches size; tokens/s over the decode-only engine steps (steps that run no
//           prefill token), timed around step(), which returns once the step's logits are
//           on the host (so the GPU is synchronised);
//   prefill: --prefill-tokens prompt tokens in prompts of --prompt-len, max_new_tokens 1,
//           timed around generate().
// Best of --reps runs after a warm-up. One JSON line per figure:
//   {"bench":"rollout_gpu","phase":"decode"|"prefill","batch":B,"tokens_per_s":X,"seconds":S,
//    "weight_bytes":W,"kv_bytes_per_step":K,"dtype":"bf16","device":"<name>", ...}
// plus forward_seconds / sample_seconds (host sampling is part of every step: see
// rollout/cuda_backend.h). kv_bytes_per_step: decode, the KV cache read by one step at the
// average context; prefill, the KV written by one full step. Without a usable GPU it
// prints {"bench":"rollout_gpu","skipped":"<reason>"} and exits 0.
// Usage: rollout_gpu [--model DIR] [--dtype bf16] [--batches 1,32,256] [--prompt-len 128]
//                    [--new-tokens 128] [--prefill-tokens 8192] [--reps 3]
//                    [--max-batch-tokens 8192] [--gpu-memory-fraction 0.85]
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "core/error.h"
#include "core/text.h"
#include "kernels/device_probe.h"
#include "rollout/engine.h"

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

using namespace tandem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

namespace {

struct Args {
  std::string model = "builtin:small";
  std::string dtype = "bf16";
  std::vector<int64_t> batches = {1, 32, 256};
  int64_t prompt_len = 128;
  int64_t new_tokens = 128;
  int64_t prefill_tokens = 8192;
  int reps = 3;
  int64_t max_batch_tokens = 8192;
  double gpu_memory_fraction = 0.85;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    if (i + 1 >= argc) throw Error(fmt::format("{} needs a value", key));
    const std::string value = argv[i + 1];
    if (key == "--model") a.model = value;
    else if (key == "--dtype") a.dtype = value;
    else if (key == "--batches") {
      a.batches.clear();
      for (const std::string& b : split(value, ',')) a.batches.push_back(std::stoll(b));
    } else if (key == "--prompt-len") a.prompt_len = std::stoll(value);
    else if (key == "--new-tokens") a.new_tokens = std::stoll(value);
    else if (key == "--prefill-tokens") a.prefill_tokens = std::stoll(value);
    else if (key == "--reps") a.reps = std::stoi(value);
    else if (key == "--max-batch-tokens") a.max_batch_tokens = std::stoll(value);
    else if (key == "--gpu-memory-fraction") a.gpu_memory_fraction = std::stod(value);
    else throw Error(fmt::format("unknown option {}", key));
  }
  TANDEM_CHECK(a.prompt_len > 0 && a.new_tokens > 0 && a.prefill_tokens > 0 && a.reps > 0 && !a.batches.empty(),
               "sizes must be positive");
  return a;
}

std::vector<GenerationRequest> make_requests(std::mt19937_64& rng, int64_t count, int64_t prompt_len,
                                             int64_t new_tokens, int64_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
  std::vector<GenerationRequest> requests;
  for (int64_t i = 0; i < count; ++i) {
    GenerationRequest r;
    r.id = static_cast<uint64_t>(i);
    for (int64_t t = 0; t < prompt_len; ++t) r.prompt.push_back(token(rng));
    r.max_new_tokens = new_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0;  // greedy: the cheapest host sampling
    r.seed = rng();
    requests.push_back(std::move(r));
  }
  return requests;
}

struct Run {
  double seconds = 0;
  int64_t tokens = 0;
  double forward_seconds = 0, sample_seconds = 0;
};

// Steps `requests` to completion; times the steps that run no prefill token.
Run decode_run(RolloutEngine& engine, const std::vector<GenerationRequest>& requests) {
  for (const GenerationRequest& r : requests) engine.add_request(r);
  Run run;
  while (engine.has_unfinished()) {
    const EngineStats before = engine.stats();
    const auto start = Clock::now();
    engine.step();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const EngineStats& after = engine.stats();
    if (after.prefill_tokens == before.prefill_tokens) {
      run.seconds += seconds;
      run.tokens += after.decode_tokens - before.decode_tokens;
      run.forward_seconds += after.forward_seconds - before.forward_seconds;
      run.sample_seconds += after.sample_seconds - before.sample_seconds;
    }
  }
  return run;
}

Run prefill_run(RolloutEngine& engine, const std::vector<GenerationRequest>& requests) {
  const EngineStats before = engine.stats();
  const auto start = Clock::now();
  engine.generate(requests);
  Run run;
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  run.tokens = engine.stats().prefill_tokens - before.prefill_tokens;
  run.forward_seconds = engine.stats().forward_seconds - before.forward_seconds;
  run.sample_seconds = engine.stats().sample_seconds - before.sample_seconds;
  return run;
}

int bench(const Args& args) {
  const CudaProbe probe = probe_cuda();
  if (!probe.usable) {
    std::printf("%s\n", Json{{"bench", "rollout_gpu"}, {"skipped", probe.detail}}.dump().c_str());
    return 0;
  }
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, 0) != cudaSuccess) throw Error("cudaGetDeviceProperties failed");
  const std::string device = props.name;

  const std::string dir = resolve_model_path(args.model);
  const ModelConfig config = read_model_config(dir + "/config.json");
  const int64_t element = args.dtype == "fp32" ? 4 : 2;
  const int64_t weight_bytes = parameter_count(config) * element;
  const int64_t kv_bytes_per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * element;
  const int64_t prefill_prompts = std::max<int64_t>(1, args.prefill_tokens / args.prompt_len);

  EngineOptions options;
  options.device = "cuda";
  options.dtype = args.dtype;
  options.gpu_memory_fraction = args.gpu_memory_fraction;
  options.max_batch_tokens = args.max_batch_tokens;
  options.max_running = std::max(*std::max_element(args.batches.begin(), args.batches.end()), prefill_prompts);
  RolloutEngine engine(config, load_model_weights(dir, config), options);
  std::fprintf(stderr, "rollout_gpu: %s on %s, %lld KV blocks\n", args.model.c_str(), engine.backend_name().c_str(),
               static_cast<long long>(engine.stats().kv_blocks_total));

  std::mt19937_64 rng(1);
  auto emit = [&](const char* phase, int64_t batch, const Run& best, int64_t kv_bytes_per_step) {
    Json line = {{"bench", "rollout_gpu"},
                 {"phase", phase},
                 {"batch", batch},
                 {"tokens_per_s", static_cast<double>(best.tokens) / best.seconds},
                 {"seconds", best.seconds},
                 {"weight_bytes", weight_bytes},
                 {"kv_bytes_per_step", kv_bytes_per_step},
                 {"dtype", args.dtype},
                 {"device", device},
                 {"tokens", best.tokens},
                 {"forward_seconds", best.forward_seconds},
                 {"sample_seconds", best.sample_seconds}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  };
  auto best_of = [&](auto run_once) {
    Run best;
    for (int r = 0; r < args.reps; ++r) {
      const Run run = run_once();
      if (run.tokens > 0 && (best.tokens == 0 || run.tokens / run.seconds > best.tokens / best.seconds)) best = run;
    }
    return best;
  };

  // Warm-up: cuBLAS heuristics and kernels for a decode and a prefill shape.
  engine.generate(make_requests(rng, 2, args.prompt_len, 4, config.vocab_size));

  for (int64_t batch : args.batches) {
    const std::vector<GenerationRequest> requests =
        make_requests(rng, batch, args.prompt_len, args.new_tokens, config.vocab_size);
    const Run best = best_of([&] { return decode_run(engine, requests); });
    const int64_t average_context = args.prompt_len + args.new_tokens / 2;
    emit("decode", batch, best, batch * average_context * kv_bytes_per_token);
  }
  const std::vector<GenerationRequest> prompts = make_requests(rng, prefill_prompts, args.prompt_len, 1, config.vocab_size);
  const Run best = best_of([&] { return prefill_run(engine, prompts); });
  emit("prefill", prefill_prompts, best, std::min(args.max_batch_tokens, prefill_prompts * args.prompt_len) * kv_bytes_per_token);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return bench(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rollout_gpu: %s\n", e.what());
    return 1;
  }
}
