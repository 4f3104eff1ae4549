// bench/rollout_cpu: generation speed of the rollout engine's CPU backend against
// llama.cpp's prebuilt CPU library on the same weights (F32, or BF16 with --weights bf16),
// threads and batch sizes.
//
// For each model and batch size B: B prompts of --prompt-tokens fixed pseudo-random ids
// (bench_prompt_token, the same ids for both), --new-tokens new tokens each, greedy,
// every sequence running the full length. Prefill (all B prompts in one step, which also
// samples each first token) and decode (the remaining --new-tokens - 1 steps of B tokens)
// are timed separately, --repeats times after one short warm-up run; figures are medians
// with the min and max over the repeats. The engine's side is timed around step(); its
// decode line also carries the engine's own split of decode time: forward (the model,
// logits included) and sample (host sampling, log-probs, stop checks); the rest is
// scheduling. llama.cpp's side is bench/llama_cpp_decode.c, compiled with `cc` at bench
// time against scripts/fetch_llama_cpp.sh's libraries, run on an F32 GGUF export of the
// same weights (write_gguf_model): one llama_batch per step, llama_decode, argmax.
//
// One JSON line per (model, impl, batch, phase) and one per (model, batch) with the ratios
// tandem / llama.cpp (above 1: tandem is faster) and the goal of issue 32 where it has one
// (decode: 1.5x at batch 1, 2x at batch 8 and above). Decode at batch 1 is bounded by memory
// bandwidth: a line per model gives the machine's read bandwidth (measured here, on the same
// threads) and the weight bytes each step streams, and each batch-1 decode line the bytes
// per second it achieved and their share of that bandwidth. Each line carries the 1-minute
// load average, so figures taken on a busy machine say so.
// Options: `rollout_cpu --help`. The full comparison (both default models, 2 threads) takes
// 30-40 minutes on 2 idle cores; measure on an idle machine: llama.cpp's threads spin
// at barriers, and on a busy machine its 2-thread runs slow down by 10-100x.
#include "actor/gguf_model.h"
#include "actor/model_weights.h"
#include "actor/policy_torch.h"
#include "actor/presets.h"
#include "core/error.h"
#include "core/files.h"
#include "core/process.h"
#include "core/text.h"
#include "rollout/cpu_gemm.h"
#include "rollout/cpu_ops.h"
#include "rollout/engine.h"
#include "rollout/thread_pool.h"
#include "torch_generate.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>

using namespace tandem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

namespace {

constexpr const char* kUsage = R"(Usage: rollout_cpu [options]
Generation speed (prefill and decode tokens/s, medians with min and max) of tandem's rollout
engine on CPU against llama.cpp's prebuilt CPU library, on the same F32 weights.

  --model M            a model tandem loads: a Hugging Face directory, a .gguf or llama2.c
                       .bin file, builtin:tiny|small, or shape:qwen3-0.6b (random weights of
                       Qwen3-0.6B's shape, made in memory). Repeat for several models.
                       Default: builtin:small and shape:qwen3-0.6b.
  --threads N          CPU threads for both engines (default 2)
  --batches LIST       comma-separated batch sizes (default 1,8,32)
  --prompt-tokens N    prompt length (default 16)
  --new-tokens N       new tokens per sequence, at least 2 (default 64)
  --repeats N          timed runs per (model, batch), after one warm-up (default 3)
  --weights W          fp32 | bf16: the weights both engines read (tandem: rollout.cpu_weights;
                       llama.cpp: an F32 or BF16 GGUF of the same values) (default fp32)
  --llama-cpp DIR      llama.cpp's lib/ and src/ (default $TANDEM_LLAMA_CPP, else
                       build/test-assets/llama.cpp from scripts/fetch_llama_cpp.sh)
  --no-llama-cpp       time tandem only
  --torch              also time a plain libtorch loop with a growing KV cache (whole
                       generation, prefill included) and Eigen's matrix product against
                       at::linear on the small preset's MLP shape
  --help               this text
Output: JSON lines on stdout; progress on stderr.
)";

// Qwen3-0.6B's config.json (Hugging Face Qwen/Qwen3-0.6B), the shape of shape:qwen3-0.6b.
constexpr const char* kQwen3_0_6B = R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
  "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
  "rope_theta": 1000000, "rms_norm_eps": 1e-06, "tie_word_embeddings": true, "hidden_act": "silu",
  "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "float32"})";

struct Args {
  std::vector<std::string> models;  // empty: the defaults
  int threads = 2;
  std::vector<int64_t> batches = {1, 8, 32};
  int64_t prompt_tokens = 16;
  int64_t new_tokens = 64;
  int repeats = 3;
  std::string weights = "fp32";
  std::string llama_cpp;
  bool run_llama_cpp = true;
  bool torch = false;
};

Args parse(int argc, char** argv) {
  Args a;
  const char* env = std::getenv("TANDEM_LLAMA_CPP");
  a.llama_cpp = env && *env ? env : TANDEM_SOURCE_DIR "/build/test-assets/llama.cpp";
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--no-llama-cpp") { a.run_llama_cpp = false; continue; }
    if (key == "--torch") { a.torch = true; continue; }
    static const std::set<std::string> kValued = {"--model",      "--threads", "--batches",  "--prompt-tokens",
                                                  "--new-tokens", "--repeats", "--llama-cpp", "--weights"};
    if (!kValued.count(key)) throw Error(fmt::format("unknown option {} (see --help)", key));
    if (i + 1 >= argc) throw Error(fmt::format("{} needs a value (see --help)", key));
    const std::string value = argv[++i];
    if (key == "--model") a.models.push_back(value);
    else if (key == "--threads") a.threads = std::stoi(value);
    else if (key == "--batches") {
      a.batches.clear();
      for (const std::string& b : split(value, ',')) a.batches.push_back(std::stoll(b));
    } else if (key == "--prompt-tokens") a.prompt_tokens = std::stoll(value);
    else if (key == "--new-tokens") a.new_tokens = std::stoll(value);
    else if (key == "--weights") {
      if (value != "fp32" && value != "bf16") throw Error(fmt::format("--weights {}: fp32 or bf16", value));
      a.weights = value;
    }
    else if (key == "--repeats") a.repeats = std::stoi(value);
    else a.llama_cpp = value;
  }
  if (a.models.empty()) a.models = {"builtin:small", "shape:qwen3-0.6b"};
  TANDEM_CHECK(a.threads > 0 && a.prompt_tokens > 0 && a.new_tokens >= 2 && a.repeats > 0 && !a.batches.empty(),
               "--threads, --prompt-tokens and --repeats must be positive, --new-tokens at least 2");
  for (int64_t b : a.batches) TANDEM_CHECK(b > 0, "batch sizes must be positive");
  return a;
}

double load_average() {
  double one_minute = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &one_minute) != 1) one_minute = -1;
    std::fclose(f);
  }
  return one_minute;
}

void emit(Json line) {
  line["loadavg_1m"] = load_average();
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

// `x` to `decimals` places: the figures are not that precise, and the lines stay readable.
double rounded(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(x * scale) / scale;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double median_rate(double tokens, const std::vector<double>& seconds) {
  std::vector<double> rates;
  for (double s : seconds) rates.push_back(tokens / s);
  return median_of(rates);
}

// {"median", "min", "max"} of tokens / seconds[i].
Json rate_spread(double tokens, const std::vector<double>& seconds) {
  const auto [fastest, slowest] = std::minmax_element(seconds.begin(), seconds.end());
  return Json{{"median", rounded(median_rate(tokens, seconds), 1)},
              {"min", rounded(tokens / *slowest, 1)},
              {"max", rounded(tokens / *fastest, 1)}};
}

// splitmix64 of (b, t): fixed pseudo-random prompt ids, the same in bench/llama_cpp_decode.c.
int32_t bench_prompt_token(int64_t b, int64_t t, int64_t vocab) {
  uint64_t z = (static_cast<uint64_t>(b) << 32 | static_cast<uint64_t>(t)) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<int32_t>(z % static_cast<uint64_t>(vocab));
}

struct BenchModel {
  std::string name;
  ModelConfig config;
  ModelWeights weights;
};

BenchModel load_bench_model(const std::string& spec) {
  BenchModel m;
  m.name = spec;
  if (spec == "shape:qwen3-0.6b") {
    m.config = parse_model_config(kQwen3_0_6B, "Qwen3-0.6B's config.json");
    m.weights = random_model_weights(m.config, 1);
    return m;
  }
  const std::string dir = resolve_model_path(spec);
  m.config = read_model_config(dir + "/config.json");
  m.weights = load_model_weights(dir, m.config);
  return m;
}

// Per-repeat wall times of one implementation at one batch size.
struct Timings {
  int64_t prefill_tokens = 0, decode_tokens = 0;  // per run
  std::vector<double> prefill_s, decode_s;
  std::vector<double> decode_forward_s, decode_sample_s;  // tandem only: the engine's split of decode_s
};

// ---- llama.cpp ------------------------------------------------------------------------

std::string compile_llama_cpp_harness(const std::string& root, const std::string& build_dir) {
  if (!std::filesystem::exists(root + "/lib/libllama.so") || !std::filesystem::exists(root + "/src/include/llama.h")) {
    throw Error(fmt::format("llama.cpp is absent from {}: run scripts/fetch_llama_cpp.sh (npm and the network), "
                            "pass --llama-cpp DIR, or --no-llama-cpp",
                            root));
  }
  const std::string out = build_dir + "/llama_cpp_decode", log = build_dir + "/cc.log";
  ChildProcess cc = ChildProcess::spawn(
      {"/usr/bin/env", "cc", "-O2", "-o", out, TANDEM_SOURCE_DIR "/bench/llama_cpp_decode.c", "-I" + root + "/src/include",
       "-I" + root + "/src/ggml/include", "-L" + root + "/lib", "-lllama", "-lggml", "-lggml-base",
       "-Wl,-rpath," + root + "/lib", "-lm"},
      {log, false});
  const auto status = cc.wait_for(300);
  if (!status || !status->success()) {
    throw Error(fmt::format("compiling bench/llama_cpp_decode.c failed: {}", read_file(log).value_or("")));
  }
  return out;
}

// Runs the harness on `gguf` for every batch size; timings by batch size.
std::map<int64_t, Timings> run_llama_cpp(const std::string& harness, const std::string& root, const std::string& gguf,
                                         const Args& args, const std::string& work_dir) {
  std::string batches;
  for (int64_t b : args.batches) batches += (batches.empty() ? "" : ",") + std::to_string(b);
  const std::string log = work_dir + "/llama_cpp.out";
  std::filesystem::remove(log);
  ChildProcess run = ChildProcess::spawn({harness, root + "/lib", gguf, std::to_string(args.threads), batches,
                                          std::to_string(args.prompt_tokens), std::to_string(args.new_tokens),
                                          std::to_string(args.repeats)},
                                         {log, false});
  const auto status = run.wait_for(24 * 3600);
  const std::string out = read_file(log).value_or("");
  if (!status || !status->success()) throw Error(fmt::format("llama.cpp on {}: {}", gguf, out));
  std::map<int64_t, Timings> by_batch;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{\"impl\"", 0) != 0) continue;
    const Json j = Json::parse(line);
    Timings& t = by_batch[j.at("batch").get<int64_t>()];
    t.prefill_tokens = j.at("prefill_tokens").get<int64_t>();
    t.decode_tokens = j.at("decode_tokens").get<int64_t>();
    t.prefill_s = j.at("prefill_seconds").get<std::vector<double>>();
    t.decode_s = j.at("decode_seconds").get<std::vector<double>>();
  }
  return by_batch;
}

// ---- tandem ---------------------------------------------------------------------------

std::vector<GenerationRequest> bench_requests(int64_t batch, int64_t prompt_tokens, int64_t new_tokens, int64_t vocab) {
  std::vector<GenerationRequest> requests;
  for (int64_t b = 0; b < batch; ++b) {
    GenerationRequest r;
    r.id = static_cast<uint64_t>(b);
    for (int64_t t = 0; t < prompt_tokens; ++t) r.prompt.push_back(bench_prompt_token(b, t, vocab));
    r.max_new_tokens = new_tokens;
    r.ignore_eos = true;         // every sequence runs the full length, as in llama.cpp's loop
    r.sampling.temperature = 0;  // greedy, against llama.cpp's argmax
    r.seed = static_cast<uint64_t>(b);
    requests.push_back(std::move(r));
  }
  return requests;
}

// One run to completion; a step that runs any prompt token counts as prefill, the rest as
// decode. Appends this run's times to `t` (token counts are per run).
void tandem_run(RolloutEngine& engine, const std::vector<GenerationRequest>& requests, Timings& t) {
  for (const GenerationRequest& r : requests) engine.add_request(r);
  double prefill = 0, decode = 0, forward = 0, sample = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0;
  while (engine.has_unfinished()) {
    const EngineStats before = engine.stats();
    const auto start = Clock::now();
    engine.step();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const EngineStats& after = engine.stats();
    if (after.prefill_tokens != before.prefill_tokens) {
      prefill += seconds;
      prefill_tokens += after.prefill_tokens - before.prefill_tokens;
    } else {
      decode += seconds;
      decode_tokens += after.decode_tokens - before.decode_tokens;
      forward += after.forward_seconds - before.forward_seconds;
      sample += after.sample_seconds - before.sample_seconds;
    }
  }
  t.prefill_tokens = prefill_tokens;
  t.decode_tokens = decode_tokens;
  t.prefill_s.push_back(prefill);
  t.decode_s.push_back(decode);
  t.decode_forward_s.push_back(forward);
  t.decode_sample_s.push_back(sample);
}

Timings time_tandem(RolloutEngine& engine, const Args& args, int64_t batch, int64_t vocab) {
  Timings warm, t;
  tandem_run(engine, bench_requests(batch, args.prompt_tokens, std::min<int64_t>(args.new_tokens, 4), vocab), warm);
  const std::vector<GenerationRequest> requests = bench_requests(batch, args.prompt_tokens, args.new_tokens, vocab);
  for (int r = 0; r < args.repeats; ++r) tandem_run(engine, requests, t);
  return t;
}

// ---- libtorch (--torch) ---------------------------------------------------------------

// Median of `repeats` wall times.
template <class Fn>
double median_seconds(int repeats, Fn fn) {
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    fn();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median_of(seconds);
}

void bench_linear(ThreadPool& pool, int repeats) {
  // The small preset's MLP up-projection: [rows, 256] x [768, 256]^T.
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
    const double ours = median_seconds(repeats, [&] {
      for (int i = 0; i < calls; ++i) cpu::linear(pool, x.data(), rows, in, w.data(), nullptr, out, y.data());
    }) / calls;
    const double torch = median_seconds(repeats, [&] {
      c10::InferenceMode guard;
      for (int i = 0; i < calls; ++i) at::linear(x_t, w_t);
    }) / calls;
    const double flops = 2.0 * rows * in * out;
    emit({{"bench", "rollout_cpu"}, {"op", "linear"}, {"rows", rows}, {"in", in}, {"out", out},
          {"eigen_us", rounded(ours * 1e6, 2)}, {"torch_us", rounded(torch * 1e6, 2)},
          {"eigen_gflops", rounded(flops / ours / 1e9, 2)}, {"torch_gflops", rounded(flops / torch / 1e9, 2)},
          {"speedup_vs_torch", rounded(torch / ours, 2)}});
  }
}

// ---- the decode roofline ---------------------------------------------------------------

// The machine's read bandwidth from memory on `threads` threads, bytes/s: the best of three
// timed passes (after one untimed) summing a 1 GiB buffer, far past any cache, each thread
// its own contiguous part, 16-byte loads into 4 independent sums.
double measured_read_bandwidth(int threads) {
  typedef float Vec __attribute__((vector_size(16)));
  const int64_t vectors = (int64_t{1} << 30) / int64_t{sizeof(Vec)};
  std::vector<Vec> buffer(static_cast<size_t>(vectors), Vec{1, 1, 1, 1});  // written: its pages exist
  ThreadPool pool(threads);
  std::vector<float> sums(static_cast<size_t>(threads));
  double best = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const auto start = Clock::now();
    pool.run(threads, [&](int64_t t) {
      Vec acc[4] = {};
      const int64_t begin = vectors * t / threads, end = vectors * (t + 1) / threads;
      int64_t i = begin;
      for (; i + 4 <= end; i += 4) {
        for (int l = 0; l < 4; ++l) acc[l] += buffer[static_cast<size_t>(i + l)];
      }
      for (; i < end; ++i) acc[0] += buffer[static_cast<size_t>(i)];
      const Vec total = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      sums[static_cast<size_t>(t)] = total[0] + total[1] + total[2] + total[3];
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (pass > 0) best = std::max(best, static_cast<double>(vectors) * sizeof(Vec) / seconds);
  }
  double checksum = 0;
  for (float v : sums) checksum += v;
  if (checksum != static_cast<double>(vectors) * 4) throw Error("rollout_cpu: the bandwidth pass summed wrongly");
  return best;
}

// Bytes of weights a decode step streams: every matrix the forward multiplies by (the LM
// head once; an untied embedding table is only indexed). At batch 1 each is read
// once per token, so bandwidth / these bytes bounds the decode rate (the roofline).
double decode_weight_bytes(const ModelConfig& config, const ModelWeights& weights, double bytes_per_weight) {
  double bytes = 0;
  for (const WeightTensor& tensor : weights.tensors()) {
    if (tensor.shape.size() != 2) continue;  // norms and biases: negligible
    if (tensor.name == "model.embed_tokens.weight" && !config.tie_word_embeddings) continue;
    bytes += bytes_per_weight * static_cast<double>(tensor.data.size());
  }
  return bytes;
}

// ---- the comparison -------------------------------------------------------------------

void emit_phase(const std::string& model, const char* impl, int64_t batch, const char* phase, int64_t tokens,
                const std::vector<double>& seconds, const Args& args, Json extra = Json::object()) {
  Json line = {{"bench", "rollout_cpu"}, {"model", model},     {"impl", impl},
               {"batch", batch},         {"phase", phase},     {"threads", args.threads}, {"weights", args.weights},
               {"tokens", tokens},       {"repeats", args.repeats},
               {"tokens_per_s", rate_spread(static_cast<double>(tokens), seconds)}};
  line.update(extra);
  emit(line);
}

void bench_model(const std::string& spec, const Args& args, const std::string& harness, const std::string& work_dir) {
  std::fprintf(stderr, "rollout_cpu: loading %s\n", spec.c_str());
  BenchModel m = load_bench_model(spec);
  const ModelConfig config = m.config;
  emit({{"bench", "rollout_cpu"}, {"model", m.name}, {"model_type", config.model_type},
        {"parameters", parameter_count(config)}, {"weight_mib_f32", rounded(parameter_count(config) * 4.0 / (1 << 20), 1)},
        {"threads", args.threads}, {"prompt_tokens", args.prompt_tokens}, {"new_tokens", args.new_tokens}});

  std::map<int64_t, Timings> llama;
  if (!harness.empty()) {
    const std::string gguf = work_dir + "/model-" + args.weights + ".gguf";
    std::fprintf(stderr, "rollout_cpu: writing %s, running llama.cpp\n", gguf.c_str());
    // Token ids only, no tokenizer. BF16: the same rounding tandem's bf16 weights make.
    write_gguf_model(gguf, config, m.weights, "",
                     args.weights == "bf16" ? GgufTensorType::gguf_bf16 : GgufTensorType::gguf_f32);
    llama = run_llama_cpp(harness, args.llama_cpp, gguf, args, work_dir);
    std::filesystem::remove(gguf);
  }

  const double weight_bytes = decode_weight_bytes(config, m.weights, args.weights == "bf16" ? 2.0 : 4.0);
  const double bandwidth = measured_read_bandwidth(args.threads);
  emit({{"bench", "rollout_cpu"}, {"model", m.name}, {"machine_read_bandwidth_gbs", rounded(bandwidth / 1e9, 2)},
        {"decode_weight_mb", rounded(weight_bytes / 1e6, 1)}, {"weights", args.weights}, {"threads", args.threads},
        {"decode_roofline_tokens_per_s_batch1", rounded(bandwidth / weight_bytes, 1)},
        // Which build of the CPU engine's tiles ran, and whether bf16 weights met bf16 rows
        // (AVX512_BF16 products) or were widened to fp32 (rollout/cpu_gemm.h).
        {"gemm_isa", cpu::gemm_nt_isa()},
        {"bf16_weight_products", args.weights != "bf16" ? "none"
                                 : cpu::gemm_nt_bf16_rounds_rows() ? "bf16 x bf16 (vdpbf16ps)" : "widened to fp32"}});
  // At batch 1: the weight bytes streamed per second, and their share of the machine's bandwidth.
  auto roofline = [&](int64_t batch, const Timings& t) {
    const double rate = median_rate(static_cast<double>(t.decode_tokens), t.decode_s) / static_cast<double>(batch);
    return Json{{"decode_weight_gbs", rounded(rate * weight_bytes / 1e9, 2)},
                {"bandwidth_share", rounded(rate * weight_bytes / bandwidth, 3)}};
  };

  std::unique_ptr<PolicyModel> torch_model;
  if (args.torch) torch_model = std::make_unique<PolicyModel>(config, m.weights, at::kFloat);
  const int64_t max_batch = *std::max_element(args.batches.begin(), args.batches.end());
  EngineOptions options;
  options.threads = args.threads;
  options.cpu_weights = args.weights;
  // Room for every sequence of the largest batch, and its whole prefill in one step, as
  // llama.cpp gets (its n_ubatch is sized the same way).
  const int64_t blocks_per_sequence = (args.prompt_tokens + args.new_tokens + options.block_size - 1) / options.block_size;
  const int64_t kv_bytes_per_token = 2 * config.num_hidden_layers * config.kv_size() * int64_t{sizeof(float)};
  options.kv_cache_bytes = std::max(options.kv_cache_bytes,
                                    (max_batch * blocks_per_sequence + 2) * options.block_size * kv_bytes_per_token);
  options.max_batch_tokens = std::max(options.max_batch_tokens, max_batch * args.prompt_tokens);
  options.max_running = std::max(options.max_running, max_batch);
  std::fprintf(stderr, "rollout_cpu: running tandem\n");
  RolloutEngine engine(config, std::move(m.weights), options);

  for (int64_t batch : args.batches) {
    const Timings t = time_tandem(engine, args, batch, config.vocab_size);
    emit_phase(m.name, "tandem", batch, "prefill", t.prefill_tokens, t.prefill_s, args);
    Json decode_extra = {{"decode_seconds_median", rounded(median_of(t.decode_s), 6)},
                         {"forward_seconds_median", rounded(median_of(t.decode_forward_s), 6)},
                         {"sample_seconds_median", rounded(median_of(t.decode_sample_s), 6)}};
    if (batch == 1) decode_extra.update(roofline(batch, t));
    emit_phase(m.name, "tandem", batch, "decode", t.decode_tokens, t.decode_s, args, decode_extra);
    Json ratio = {{"bench", "rollout_cpu"}, {"model", m.name}, {"batch", batch}, {"threads", args.threads},
                  {"weights", args.weights}};
    if (const auto it = llama.find(batch); it != llama.end()) {
      const Timings& l = it->second;
      emit_phase(m.name, "llama.cpp", batch, "prefill", l.prefill_tokens, l.prefill_s, args);
      Json llama_extra = {{"decode_seconds_median", rounded(median_of(l.decode_s), 6)}};
      if (batch == 1) llama_extra.update(roofline(batch, l));
      emit_phase(m.name, "llama.cpp", batch, "decode", l.decode_tokens, l.decode_s, args, llama_extra);
      const double decode_ratio = median_rate(t.decode_tokens, t.decode_s) / median_rate(l.decode_tokens, l.decode_s);
      ratio["decode_ratio_vs_llama_cpp"] = rounded(decode_ratio, 3);
      ratio["prefill_ratio_vs_llama_cpp"] =
          rounded(median_rate(t.prefill_tokens, t.prefill_s) / median_rate(l.prefill_tokens, l.prefill_s), 3);
      // Issue 32's goal: 1.5x llama.cpp's decode at batch 1, twice it at batch 8 and above.
      const double goal = batch == 1 ? 1.5 : batch >= 8 ? 2.0 : 0.0;
      if (goal > 0) {
        ratio["decode_goal"] = goal;
        ratio["decode_meets_goal"] = decode_ratio >= goal;
      }
    }
    if (torch_model) {
      std::vector<std::vector<int32_t>> prompts;
      for (const GenerationRequest& r : bench_requests(batch, args.prompt_tokens, 1, config.vocab_size)) {
        prompts.push_back(r.prompt);
      }
      const double seconds = median_seconds(args.repeats, [&] {
        bench::torch_generate_kv_cache(*torch_model, prompts, args.new_tokens, 1);
      });
      const double tandem_seconds = median_of(t.prefill_s) + median_of(t.decode_s);
      emit({{"bench", "rollout_cpu"}, {"model", m.name}, {"impl", "torch_kv_cache"}, {"batch", batch},
            {"phase", "generate"}, {"seconds_median", rounded(seconds, 6)},
            {"tokens_per_s", rounded(static_cast<double>(batch * args.new_tokens) / seconds, 1)}});
      ratio["generate_ratio_vs_torch_kv_cache"] = rounded(seconds / tandem_seconds, 3);
    }
    emit(ratio);
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  try {
    const Args args = parse(argc, argv);
    TempDir work("tandem-rollout-cpu-");
    const std::string harness = args.run_llama_cpp ? compile_llama_cpp_harness(args.llama_cpp, work.path()) : "";
    if (args.torch) {
      at::set_num_threads(args.threads);
      ThreadPool pool(args.threads);
      bench_linear(pool, args.repeats);
    }
    for (const std::string& model : args.models) bench_model(model, args, harness, work.path());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rollout_cpu: %s\n", e.what());
    return 1;
  }
}
