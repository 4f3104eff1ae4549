// `tandem init-model`, `tandem generate`, `tandem export` and `builtin:` and .gguf model paths as a user meets them.
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/tokenizer.h"
#include "core/files.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <sstream>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

}  // namespace

TEST_CASE("init-model writes a complete Hugging Face directory that loads back") {
  TempDir dir;
  const std::string model = dir.path() + "/tiny", out = dir.path() + "/out.txt";
  ExitStatus status = run_tandem({"init-model", "--preset", "tiny", "--out", model, "--seed", "4"}, out);
  REQUIRE_MESSAGE(status.success(), read_text(out));
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    CHECK_MESSAGE(fs::exists(fs::path(model) / file), file);
  }
  const ModelConfig config = read_model_config(model + "/config.json");
  CHECK(config.model_type == "qwen3");
  const ModelWeights weights = load_model_weights(model, config);
  CHECK(weights.contains("model.layers.1.self_attn.q_norm.weight"));
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(model);
  CHECK(tokenizer->vocab_size() == config.vocab_size);
  CHECK(tokenizer->encode("hi<|im_end|>") == std::vector<int32_t>{'h', 'i', 258});

  // Into an existing non-empty directory: a usage error, nothing overwritten.
  const std::string before = read_text(model + "/config.json");
  ExitStatus again = run_tandem({"init-model", "--preset", "small", "--out", model}, out);
  CHECK(again.exit_code == 2);
  CHECK(read_text(out).find("not an empty directory") != std::string::npos);
  CHECK(read_text(model + "/config.json") == before);
  CHECK(run_tandem({"init-model", "--preset", "huge", "--out", dir.path() + "/x"}, out).exit_code == 2);
  CHECK_FALSE(fs::exists(dir.path() + "/x"));

  // bf16 weights: half the bytes, still loadable.
  ExitStatus bf16 = run_tandem({"init-model", "--preset", "tiny", "--out", dir.path() + "/bf16", "--dtype", "bfloat16"}, out);
  REQUIRE(bf16.success());
  CHECK(fs::file_size(dir.path() + "/bf16/model.safetensors") < fs::file_size(model + "/model.safetensors") * 6 / 10);
  CHECK(load_model_weights(dir.path() + "/bf16", config).parameter_count() == weights.parameter_count());

  // --config: config.json says the dtype written (float32 here), not the shape file's.
  std::string shape = read_text(model + "/config.json");
  const size_t dtype_at = shape.find("\"float32\"");
  REQUIRE(dtype_at != std::string::npos);
  shape.replace(dtype_at, 9, "\"bfloat16\"");
  write_file_atomic(dir.path() + "/shape.json", shape);
  REQUIRE(run_tandem({"init-model", "--config", dir.path() + "/shape.json", "--out", dir.path() + "/f32"}, out).success());
  CHECK(read_model_config(dir.path() + "/f32/config.json").torch_dtype == "float32");
}

TEST_CASE("generate prints reproducible completions with log-probs") {
  TempDir dir;
  const std::string model = dir.path() + "/tiny", out = dir.path() + "/out.txt";
  REQUIRE(run_tandem({"init-model", "--preset", "tiny", "--out", model}, out).success());
  auto generate = [&](const std::string& seed) {
    const std::string path = dir.path() + "/generate-" + seed + ".txt";
    ExitStatus status = run_tandem({"generate", "--model", model, "--prompt", "12+7=", "--prompt", "3*4=", "--n", "3",
                                    "--max-new-tokens", "9", "--temperature", "0.8", "--top-p", "0.95", "--seed", seed,
                                    "--json"},
                                   path);
    REQUIRE_MESSAGE(status.success(), read_text(path));
    return json_lines(read_text(path));
  };
  std::vector<nlohmann::json> first = generate("5");
  REQUIRE(first.size() == 6);  // 2 prompts x 3 samples
  for (const nlohmann::json& line : first) {
    const size_t tokens = line["token_ids"].size();
    CHECK(tokens >= 1);
    CHECK(tokens <= 9);
    CHECK(line["logprobs"].size() == tokens);
    for (const auto& lp : line["logprobs"]) CHECK(lp.get<double>() <= 0.0);
    CHECK((line["finish_reason"] == "length" || line["finish_reason"] == "stop"));
  }
  std::vector<nlohmann::json> again = generate("5");
  for (size_t i = 0; i < first.size(); ++i) CHECK(first[i]["token_ids"] == again[i]["token_ids"]);
  std::vector<nlohmann::json> other = generate("6");
  bool any_different = false;
  for (size_t i = 0; i < first.size(); ++i) any_different |= first[i]["token_ids"] != other[i]["token_ids"];
  CHECK(any_different);

  // The text is the response without its end-of-sequence token (the finish reason says
  // "stop"): made certain by declaring the greedy first token the model's EOS.
  const std::string greedy = dir.path() + "/greedy.txt";
  const std::vector<std::string> greedy_args = {"generate", "--model", model, "--prompt", "12+7=", "--temperature", "0",
                                                "--max-new-tokens", "3", "--json"};
  REQUIRE(run_tandem(greedy_args, greedy).success());
  const std::vector<int32_t> greedy_ids = json_lines(read_text(greedy)).at(0)["token_ids"].get<std::vector<int32_t>>();
  nlohmann::json config_json = nlohmann::json::parse(read_text(model + "/config.json"));
  config_json["eos_token_id"] = greedy_ids.at(0);
  write_file_atomic(model + "/config.json", config_json.dump(2));
  fs::remove(greedy);
  REQUIRE(run_tandem(greedy_args, greedy).success());
  const nlohmann::json stopped = json_lines(read_text(greedy)).at(0);
  CHECK(stopped["finish_reason"] == "stop");
  CHECK(stopped["token_ids"] == std::vector<int32_t>{greedy_ids.at(0)});
  CHECK(stopped["text"] == "");
}

TEST_CASE("builtin: model paths materialise the preset once in the cache") {
  TempDir dir;
  ::setenv("TANDEM_CACHE_DIR", dir.path().c_str(), 1);  // inherited by the child
  const std::string out = dir.path() + "/out.txt";
  ExitStatus status =
      run_tandem({"generate", "--model", "builtin:tiny", "--prompt", "hello", "--max-new-tokens", "4"}, out);
  REQUIRE_MESSAGE(status.success(), read_text(out));
  CHECK(fs::exists(dir.path() + "/models/tiny-seed1/model.safetensors"));
  CHECK(read_text(out).find("--- prompt 1, sample 1") != std::string::npos);

  ExitStatus unknown = run_tandem({"generate", "--model", "builtin:tinny", "--prompt", "x"}, out);
  CHECK(unknown.exit_code == 2);
  CHECK(read_text(out).find("did you mean \"tiny\"") != std::string::npos);
  ExitStatus missing = run_tandem({"generate", "--model", dir.path() + "/nowhere", "--prompt", "x"}, out);
  CHECK(missing.exit_code == 2);
  CHECK(read_text(out).find("nowhere") != std::string::npos);
  ::unsetenv("TANDEM_CACHE_DIR");
}

TEST_CASE("tokenize prints ids as JSON and --decode reverses it; bad input exits 2") {
  TempDir dir;
  const std::string model = dir.path() + "/tiny", out = dir.path() + "/out.txt";
  REQUIRE(run_tandem({"init-model", "--preset", "tiny", "--out", model}, out).success());
  auto tandem_output = [&](const std::vector<std::string>& args, int expected_exit) {
    const std::string path = dir.path() + "/tokenize.txt";
    std::filesystem::remove(path);
    ExitStatus status = run_tandem(args, path);
    CHECK_MESSAGE(status.exit_code == expected_exit, read_text(path));
    return read_text(path);
  };
  CHECK(tandem_output({"tokenize", "--tokenizer", model, "--text", "ab<|im_end|>"}, 0) == "[97,98,258]\n");
  CHECK(tandem_output({"tokenize", "--tokenizer", model, "--decode", "--text", "[97,98,258]"}, 0) == "ab<|im_end|>");
  const std::string file = dir.path() + "/prompt.txt";
  std::ofstream(file) << "é\n";
  CHECK(tandem_output({"tokenize", "--tokenizer", model, "--file", file}, 0) == "[195,169,10]\n");

  CHECK(tandem_output({"tokenize", "--tokenizer", model, "--decode", "--text", "[97,"}, 2).find("not JSON") !=
        std::string::npos);
  CHECK(tandem_output({"tokenize", "--tokenizer", model, "--decode", "--text", "[97,9999]"}, 2)
            .find("token 9999 at position 1 is outside the vocabulary") != std::string::npos);
  CHECK(tandem_output({"tokenize", "--tokenizer", dir.path() + "/none", "--text", "x"}, 2).find("none") !=
        std::string::npos);
  CHECK(tandem_output({"tokenize", "--tokenizer", model, "--text", "x", "--file", file}, 2).find("excludes") !=
        std::string::npos);
}

TEST_CASE("export writes a run's policy as GGUF or Hugging Face; validate takes a .gguf model.path") {
  TempDir dir;
  ::setenv("TANDEM_CACHE_DIR", (dir.path() + "/cache").c_str(), 1);
  const std::string run = dir.path() + "/run", out = dir.path() + "/out.txt";
  REQUIRE(run_tandem({"init-model", "--preset", "tiny", "--out", run + "/policy", "--seed", "2"}, out).success());
  const std::string gguf = dir.path() + "/policy.gguf";
  ExitStatus status = run_tandem({"export", run, "--format", "gguf", "--out", gguf}, out);
  REQUIRE_MESSAGE(status.success(), read_text(out));
  CHECK(read_text(out).find("wrote " + gguf + ": qwen3 (") != std::string::npos);
  CHECK(read_text(gguf).substr(0, 4) == "GGUF");

  // hf in bf16: the tokenizer comes along; q8_0 is for GGUF only; an existing output is refused.
  REQUIRE(run_tandem({"export", run + "/policy", "--format", "hf", "--dtype", "bf16", "--out", dir.path() + "/hf"}, out)
              .success());
  CHECK(read_model_config(dir.path() + "/hf/config.json").torch_dtype == "bfloat16");
  CHECK(read_text(dir.path() + "/hf/tokenizer.json") == read_text(run + "/policy/tokenizer.json"));
  fs::remove(out);
  CHECK(run_tandem({"export", run, "--format", "hf", "--dtype", "q8_0", "--out", dir.path() + "/q"}, out).exit_code == 2);
  CHECK(read_text(out).find("--dtype q8_0: allowed for hf: f32, f16, bf16 (q8_0 is for --format gguf)") != std::string::npos);
  fs::remove(out);
  CHECK(run_tandem({"export", run, "--format", "gguf", "--out", gguf}, out).exit_code == 2);
  CHECK(read_text(out).find(gguf + " exists; choose another output") != std::string::npos);
  // A run that has not finished has no policy yet.
  fs::create_directories(dir.path() + "/unfinished/checkpoints");
  std::ofstream(dir.path() + "/unfinished/config.yaml") << "experiment: {}\n";
  fs::remove(out);
  CHECK(run_tandem({"export", dir.path() + "/unfinished", "--format", "gguf", "--out", dir.path() + "/u.gguf"}, out)
            .exit_code == 2);
  CHECK(read_text(out).find("has no policy/ yet") != std::string::npos);

  // The .gguf as model.path: validate converts it into the cache; a damaged one is exit 2 naming it.
  fs::remove(out);
  status = run_tandem({"validate", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--set", "model.path=" + gguf}, out);
  CHECK_MESSAGE(status.exit_code == 0, read_text(out));
  CHECK(read_text(out).find("validate: ok: model " + dir.path() + "/cache/models/gguf-v1-") != std::string::npos);
  write_file_atomic(dir.path() + "/cut.gguf", read_text(gguf).substr(0, 1000));
  fs::remove(out);
  status = run_tandem({"validate", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--set",
                       "model.path=" + dir.path() + "/cut.gguf"},
                      out);
  CHECK(status.exit_code == 2);
  CHECK(read_text(out).find("model.path: " + dir.path() + "/cut.gguf: not a valid GGUF file: truncated") !=
        std::string::npos);
  ::unsetenv("TANDEM_CACHE_DIR");
}
