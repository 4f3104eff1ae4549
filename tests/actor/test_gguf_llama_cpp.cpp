// llama.cpp as the independent reference for our GGUF files: the files tandem writes
// (`tandem convert --to gguf`, `tandem export --format gguf`) are loaded by llama.cpp's
// own library (scripts/fetch_llama_cpp.sh fetches its prebuilt CPU build; the harness
// tests/support/llama_cpp_logits.c is compiled here with `cc`), and its log-probs and greedy
// tokens must equal our rollout engine's (CPU backend) and our learner module's within
// twice the float32 bound of tests/support/forward_tolerance.h (llama.cpp computes in float32
// too: F32 weights and KV cache), for stories260K (real trained llama2.c weights, llama's interleaved q/k rows) and
// random Llama (Llama 3 RoPE scaling), Qwen2 (biases, tied) and Qwen3 (q/k norms) models.
// Our reader reading the same file back must give the same numbers as the model it came
// from, and llama.cpp's tokenizer vectors (models/ggml-vocab-*.gguf.inp/.out) must be what
// the tokenizer.json rebuilt from those vocab files encodes.
//
// Exits 77 (skip) when the llama.cpp assets are absent (TANDEM_OFFLINE=1, no npm, not
// Linux x86-64); the stories260K case reports itself skipped without ../shared/data.
#include "actor/gguf_model.h"
#include "actor/gguf_tokenizer.h"
#include "actor/llama2c.h"
#include "actor/policy_torch.h"
#include "actor/tokenizer.h"
#include "core/error.h"
#include "core/files.h"
#include "core/process.h"
#include "core/text.h"
#include "tests/support/forward_tolerance.h"
#include "tests/support/gguf_test_models.h"
#include "rollout/engine.h"
#include "tests/support/run_tandem.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

const std::string kStories = TANDEM_SOURCE_DIR "/../shared/data/tinystories/stories260K.bin";

std::string llama_cpp_dir() {
  const char* env = std::getenv("TANDEM_LLAMA_CPP");
  return env && *env ? env : TANDEM_SOURCE_DIR "/build/test-assets/llama.cpp";
}

// The harness, compiled once per process against the fetched headers and libraries.
const std::string& harness_or_skip() {
  static TempDir build("tandem-llama-cpp-");
  static std::string harness;
  if (!harness.empty()) return harness;
  const std::string root = llama_cpp_dir();
  if (!fs::exists(root + "/lib/libllama.so") || !fs::exists(root + "/src/include/llama.h")) {
    std::printf("skipped: llama.cpp is absent from %s: run scripts/fetch_llama_cpp.sh (needs npm and the network) or "
                "point TANDEM_LLAMA_CPP at a copy\n",
                root.c_str());
    std::exit(77);
  }
  const std::string out = build.path() + "/llama_cpp_logits", log = build.path() + "/cc.log";
  ChildProcess cc = ChildProcess::spawn(
      {"/usr/bin/env", "cc", "-O1", "-o", out, TANDEM_SOURCE_DIR "/tests/support/llama_cpp_logits.c", "-I" + root + "/src/include",
       "-I" + root + "/src/ggml/include", "-L" + root + "/lib", "-lllama", "-lggml", "-lggml-base",
       "-Wl,-rpath," + root + "/lib", "-lm"},
      {log, false});
  const auto status = cc.wait_for(120);
  REQUIRE_MESSAGE((status && status->success()), "compiling the llama.cpp harness failed: ", read_text(log));
  harness = out;
  return harness;
}

struct LlamaCppResult {
  std::vector<std::vector<double>> logprobs;  // [ids.size()][vocab]: after each id
  std::vector<int32_t> greedy;
};

LlamaCppResult llama_cpp(const std::string& gguf, const std::vector<int32_t>& ids, int n_greedy) {
  const std::string& harness = harness_or_skip();
  TempDir dir("tandem-llama-cpp-run-");
  std::string id_list;
  for (size_t i = 0; i < ids.size(); ++i) id_list += (i ? "," : "") + std::to_string(ids[i]);
  ChildProcess run = ChildProcess::spawn({harness, llama_cpp_dir() + "/lib", gguf, id_list, std::to_string(n_greedy)},
                                         {dir.path() + "/out", false});
  const auto status = run.wait_for(60);
  const std::string out = read_text(dir.path() + "/out");
  REQUIRE_MESSAGE((status && status->success()), "llama.cpp on ", gguf, ": ", out);
  const size_t start = out.find("{\"n_vocab\"");
  REQUIRE(start != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(out.substr(start));
  LlamaCppResult r;
  r.logprobs = j.at("logprobs").get<std::vector<std::vector<double>>>();
  r.greedy = j.at("greedy").get<std::vector<int32_t>>();
  return r;
}

// The gap between the largest and second-largest entries: where it is within twice the
// logits' float32 bound, two float32 forwards may pick either.
double top_gap(std::vector<double> v) {
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<double>());
  return v[0] - v[1];
}

struct Agreement {
  double engine = 0, learner = 0, reader = 0;  // worst |log-prob difference|
  double bound = 0;                            // what float32 allows two forwards
  int64_t compared_tokens = 0;
};

// Our engine's and learner's numbers for `model` against llama.cpp's on `gguf`, and our
// reader's model (read back from `gguf`) against `model` in our engine.
Agreement compare_with_llama_cpp(const ModelConfig& config, const ModelWeights& weights, const std::string& gguf,
                                 const std::vector<int32_t>& prompt, int new_tokens) {
  Agreement a;
  const std::vector<int32_t> greedy = llama_cpp(gguf, prompt, new_tokens).greedy;
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), greedy.begin(), greedy.end());
  const LlamaCppResult reference = llama_cpp(gguf, ids, 1);
  REQUIRE(reference.logprobs.size() == ids.size());
  REQUIRE(static_cast<int64_t>(reference.logprobs[0].size()) == config.vocab_size);
  // llama.cpp's greedy tokens are its own argmaxes (its decode path against its batch path).
  const int64_t length = static_cast<int64_t>(ids.size());
  a.bound = 2 * logprob_tolerance(config, weights, length);
  int64_t comparable = new_tokens;  // tokens before the first near-tie
  for (int t = 0; t < new_tokens; ++t) {
    const std::vector<double>& row = reference.logprobs[prompt.size() + t - 1];
    if (top_gap(row) <= 2 * logit_tolerance(config, weights, length)) {
      comparable = t;
      break;
    }
    CHECK(greedy[t] == std::max_element(row.begin(), row.end()) - row.begin());
  }
  a.compared_tokens = comparable;

  auto engine_run = [&](const ModelConfig& c, const ModelWeights& w) {
    EngineOptions options;
    options.kv_cache_bytes = 8 << 20;
    options.threads = 1;
    RolloutEngine engine(c, w, options);
    GenerationRequest request;
    request.prompt = prompt;
    request.max_new_tokens = new_tokens;
    request.sampling.temperature = 0;
    request.ignore_eos = true;
    std::vector<GeneratedSample> samples = engine.generate({request});
    REQUIRE(samples.size() == 1);
    return samples[0];
  };
  const GeneratedSample ours = engine_run(config, weights);
  for (int64_t t = 0; t < comparable; ++t) {
    INFO("generated token " << t);
    CHECK(ours.tokens[t] == greedy[t]);
    const double d = std::abs(ours.logprobs[t] - reference.logprobs[prompt.size() + t - 1][greedy[t]]);
    a.engine = std::isnan(d) ? INFINITY : std::max(a.engine, d);
  }

  // The learner's module: every position's whole log-prob row.
  PolicyModel learner(config, weights, at::kFloat);
  const at::Tensor logits = learner.forward(padded_layout({ids})).to(at::kDouble).log_softmax(-1);
  for (size_t p = 0; p < ids.size(); ++p) {
    for (int64_t v = 0; v < config.vocab_size; ++v) {
      const double d = std::abs(logits[0][static_cast<int64_t>(p)][v].item<double>() - reference.logprobs[p][v]);
      a.learner = std::isnan(d) ? INFINITY : std::max(a.learner, d);
    }
  }

  // Our reader: the file read back computes what the model it was written from computes.
  const GgufModel back = read_gguf_model(gguf);
  const GeneratedSample read_back = engine_run(back.config, back.weights);
  CHECK(read_back.tokens == ours.tokens);
  for (int64_t t = 0; t < new_tokens; ++t) {
    a.reader = std::max(a.reader, static_cast<double>(std::abs(read_back.logprobs[t] - ours.logprobs[t])));
  }
  return a;
}

}  // namespace

TEST_CASE("stories260K.bin converted to GGUF by tandem: llama.cpp's log-probs and greedy tokens are ours") {
  harness_or_skip();
  if (!fs::is_regular_file(kStories)) {
    MESSAGE("skipped: " << kStories << " is absent (the shared test data)");
    return;
  }
  TempDir dir("tandem-gguf-stories-");
  ::setenv("TANDEM_CACHE_DIR", (dir.path() + "/cache").c_str(), 1);
  const std::string gguf = dir.path() + "/stories260K.gguf", out = dir.path() + "/out.txt";
  REQUIRE(run_tandem({"convert", kStories, gguf, "--to", "gguf"}, out).exit_code == 0);
  const auto file = GgufFile::open(gguf);
  CHECK(file->get_string("tokenizer.ggml.model") == "no_vocab");

  const Llama2cModel model = read_llama2c(kStories);
  const Agreement a = compare_with_llama_cpp(model.config, model.weights, gguf, {1, 403, 407, 261, 378}, 24);
  CHECK(a.compared_tokens >= 8);  // greedy tokens before the first near-tie
  MESSAGE("stories260K: worst log-prob difference vs llama.cpp: engine " << a.engine << ", learner " << a.learner
                                                                           << " (" << a.compared_tokens
                                                                           << " greedy tokens; bound " << a.bound
                                                                           << "); reader vs .bin "
                                                                           << a.reader);
  CHECK(a.engine <= a.bound);
  CHECK(a.learner <= a.bound);
  CHECK(a.reader == 0);

  // The CLI reads the .gguf as model.path: greedy tokens and log-probs as llama.cpp's.
  const LlamaCppResult reference = llama_cpp(gguf, {1, 403, 407}, 6);
  fs::remove(out);
  REQUIRE(run_tandem({"generate", "--model", gguf, "--prompt-ids", "1,403,407", "--temperature", "0",
                      "--max-new-tokens", "6", "--json"},
                     out)
              .exit_code == 0);
  const std::string generated = read_text(out);
  const size_t json_start = generated.find("{\"");
  REQUIRE(json_start != std::string::npos);
  CHECK(nlohmann::json::parse(generated.substr(json_start, generated.find('\n', json_start) - json_start))
            .at("token_ids") == reference.greedy);
  fs::remove(out);
  CHECK(run_tandem({"generate", "--model", gguf, "--prompt", "Once"}, out).exit_code == 2);
  CHECK(read_text(out).find("has no tokenizer (a llama2.c checkpoint, a directory without tokenizer.json, or a GGUF file without a vocabulary)") !=
        std::string::npos);
  ::unsetenv("TANDEM_CACHE_DIR");
}

TEST_CASE("random Llama, Qwen2 and Qwen3 models exported to GGUF: llama.cpp's log-probs and greedy tokens are ours") {
  harness_or_skip();
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (const std::string& architecture : gguf_test_architectures()) {
    INFO(architecture);
    TempDir dir("tandem-gguf-random-");
    ::setenv("TANDEM_CACHE_DIR", (dir.path() + "/cache").c_str(), 1);
    const ModelConfig config = write_gguf_test_model(architecture, dir.path() + "/hf", rng());
    const ModelWeights weights = load_model_weights(dir.path() + "/hf", config);
    const std::string gguf = dir.path() + "/model.gguf", out = dir.path() + "/out.txt";
    REQUIRE(run_tandem({"export", dir.path() + "/hf", "--format", "gguf", "--out", gguf}, out).exit_code == 0);
    // A random model can meet a near-tie at once (about 1 prompt in 25 under the float32
    // bound): up to 4 prompts, for one with 8 greedy tokens to compare before its first.
    std::vector<int32_t> prompt;
    Agreement a;
    for (int attempt = 0; attempt < 4 && a.compared_tokens < 8; ++attempt) {
      prompt.clear();
      for (int i = 0; i < 7; ++i) prompt.push_back(static_cast<int32_t>(rng() % 256));
      a = compare_with_llama_cpp(config, weights, gguf, prompt, 16);
    }
    CHECK(a.compared_tokens >= 8);
    MESSAGE(architecture << ": worst log-prob difference vs llama.cpp: engine " << a.engine << ", learner " << a.learner
                         << " (" << a.compared_tokens << " greedy tokens; bound " << a.bound << "); reader vs safetensors "
                         << a.reader);
    CHECK(a.engine <= a.bound);
    CHECK(a.learner <= a.bound);
    CHECK(a.reader == 0);

    // tandem logprobs on the .gguf (converted into the cache with its embedded tokenizer).
    std::vector<int32_t> ids = prompt;
    const LlamaCppResult reference = llama_cpp(gguf, ids, 1);
    std::string id_list;
    for (size_t i = 0; i < ids.size(); ++i) id_list += (i ? "," : "") + std::to_string(ids[i]);
    fs::remove(out);
    REQUIRE(run_tandem({"logprobs", "--model", gguf, "--ids", id_list, "--json"}, out).exit_code == 0);
    std::istringstream lines(read_text(out));
    size_t position = 1;
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] != '{') continue;
      const nlohmann::json j = nlohmann::json::parse(line);
      REQUIRE(position < ids.size());
      CHECK(std::abs(j.at("logprob").get<double>() - reference.logprobs[position - 1][ids[position]]) <=
            2 * logprob_tolerance(config, weights, static_cast<int64_t>(ids.size())));
      ++position;
    }
    CHECK(position == ids.size());
    ::unsetenv("TANDEM_CACHE_DIR");
  }
}

TEST_CASE("llama.cpp's vocab files become tokenizer.json files that encode its test vectors") {
  const std::string models = llama_cpp_dir() + "/src/models";
  if (!fs::exists(models + "/ggml-vocab-qwen2.gguf")) harness_or_skip();  // says why and exits 77
  for (const std::string name : {"qwen2", "llama-bpe"}) {
    INFO(name);
    const std::string vocab = models + "/ggml-vocab-" + name + ".gguf";
    const auto file = GgufFile::open(vocab);
    TempDir dir("tandem-gguf-vocab-");
    REQUIRE(write_gguf_tokenizer_files(*file, dir.path()));
    std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir.path());
    const std::string inputs = read_file(vocab + ".inp").value();
    std::istringstream outputs(read_file(vocab + ".out").value());
    const std::string separator = "\n__ggml_vocab_test__\n";
    size_t checked = 0;
    for (size_t pos = 0; pos < inputs.size();) {  // as llama.cpp's tests/test-tokenizer-0.cpp reads them
      size_t next = inputs.find(separator, pos);
      if (next == std::string::npos) next = inputs.size();
      const std::string text = inputs.substr(pos, next - pos);
      pos = next + separator.size();
      std::string line;
      REQUIRE(std::getline(outputs, line));
      std::vector<int32_t> expected;
      std::istringstream ids(line);
      for (int32_t id; ids >> id;) expected.push_back(id);
      INFO(quoted(text));
      CHECK(tokenizer->encode(text) == expected);
      ++checked;
    }
    MESSAGE(name << ": " << checked << " llama.cpp tokenizer vectors");
    CHECK(checked >= 40);
  }
}
