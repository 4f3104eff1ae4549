#include "actor/presets.h"

#include "actor/gguf_model.h"
#include "actor/llama2c.h"
#include "actor/model_weights.h"
#include "actor/tokenizer.h"
#include "core/checksum.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace tandem {

namespace fs = std::filesystem;

namespace {

constexpr char kBuiltinPrefix[] = "builtin:";

ModelConfig preset_base() {
  ModelConfig c;
  c.model_type = "qwen3";
  c.qk_norm = true;
  c.vocab_size = 256 + static_cast<int64_t>(model_preset_special_tokens().size());
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {256, 258};  // <|endoftext|>, <|im_end|>
  c.torch_dtype = "float32";
  return c;
}

std::string model_cache_dir() {
  if (const char* dir = std::getenv("TANDEM_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/tandem";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/tandem";
  return (fs::temp_directory_path() / "tandem-cache").string();
}

// Bump when a conversion changes what it writes: cached directories of older
// conversions are then left alone and written afresh.
constexpr char kConversionVersion[] = "v1";

// A .gguf or llama2.c .bin file as a Hugging Face directory under the model cache, named
// by the checksum of the file (and of the tokenizer files beside a .gguf, which it
// takes), so every process of a run (controller, rollout and learner workers) reads the
// same directory and a changed file gets a new one. Written once, in a staging directory
// renamed into place: a crash leaves no half model, and of two processes converting at
// once the second finds the first's directory and drops its own.
std::string converted_model_dir(const std::string& path, bool gguf) {
  Checksum64 key;
  const uint64_t file_sum = file_checksum64(path);
  key.update(&file_sum, sizeof file_sum);
  if (gguf) {
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
      const fs::path beside = fs::path(path).parent_path() / name;
      if (!fs::exists(beside)) continue;
      const uint64_t sum = file_checksum64(beside.string());
      key.update(name, std::strlen(name));
      key.update(&sum, sizeof sum);
    }
  }
  const std::string dir = fmt::format("{}/models/{}-{}-{}", model_cache_dir(), gguf ? "gguf" : "llama2c",
                                      kConversionVersion, checksum_hex(key.digest()));
  if (fs::exists(dir + "/config.json")) return dir;
  const std::string staging = dir + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(staging, ec);
  try {
    fs::create_directories(staging);
    if (gguf) {
      convert_gguf_to_hf(path, staging, DType::f32);
    } else {
      const Llama2cModel model = read_llama2c(path);
      write_file_atomic(staging + "/config.json", model_config_to_json(model.config));
      save_model_weights(staging, model.weights, DType::f32);
    }
    fs::rename(staging, dir, ec);
    if (ec && !fs::exists(dir + "/config.json")) {
      throw Error(fmt::format("cannot move {} to {}: {}", staging, dir, ec.message()));
    }
    fs::remove_all(staging, ec);  // left only when another process renamed first
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(staging, ec);
    throw Error(fmt::format("cannot convert {} into {}: {}", path, dir, e.what()));
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
  return dir;
}

}  // namespace

std::vector<std::string> model_preset_names() { return {"tiny", "small", "tiny-tools"}; }

std::vector<std::string> model_preset_special_tokens() { return {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}; }

std::vector<std::string> model_preset_special_tokens(const std::string& preset) {
  std::vector<std::string> tokens = model_preset_special_tokens();
  if (preset == "tiny-tools") tokens.insert(tokens.end(), {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"});
  return tokens;
}

ModelConfig model_preset_config(const std::string& preset) {
  ModelConfig c = preset_base();
  c.vocab_size = 256 + static_cast<int64_t>(model_preset_special_tokens(preset).size());
  if (preset == "tiny" || preset == "tiny-tools") {  // ~0.1M parameters: tests and the quickstart
    c.hidden_size = 64;
    c.intermediate_size = 192;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
  } else if (preset == "small") {  // ~3.3M parameters: benchmarks, longer CPU runs
    c.hidden_size = 256;
    c.intermediate_size = 768;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.head_dim = 32;
  } else {
    std::string hint = closest_match(preset, model_preset_names());
    throw UsageError(fmt::format("unknown model preset {} (presets: {}){}", tandem::quoted(preset),
                                 join_choices(model_preset_names()),
                                 hint.empty() ? "" : fmt::format("; did you mean {}?", tandem::quoted(hint))));
  }
  return c;
}

void write_model_preset(const std::string& preset, const std::string& out_dir, uint64_t seed, DType dtype) {
  ModelConfig config = model_preset_config(preset);
  config.torch_dtype = dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32";
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec))) {
    throw UsageError(fmt::format("{} exists and is not an empty directory; choose another --out", out_dir));
  }
  const fs::path target = fs::absolute(out_dir);
  fs::create_directories(target.parent_path(), ec);
  if (ec) throw Error(fmt::format("cannot create {}: {}", target.parent_path().string(), ec.message()));
  // Build next to the target, then rename: a crash or a full disk leaves no half model.
  const std::string staging = target.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(staging, ec);
  try {
    fs::create_directories(staging);
    write_file_atomic(staging + "/config.json", model_config_to_json(config));
    save_model_weights(staging, random_model_weights(config, seed), dtype);
    write_byte_level_tokenizer(staging, model_preset_special_tokens(preset));
    if (fs::exists(target)) fs::remove(target);  // empty, checked above
    fs::rename(staging, target);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(staging, ec);
    throw Error(fmt::format("cannot write model {}: {}", out_dir, e.what()));
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
}

std::string resolve_model_path(const std::string& path) {
  if (path.rfind(kBuiltinPrefix, 0) == 0) {
    const std::string preset = path.substr(sizeof(kBuiltinPrefix) - 1);
    model_preset_config(preset);  // an unknown name fails here, before touching the cache
    const std::string dir = model_cache_dir() + "/models/" + preset + "-seed1";
    if (!fs::exists(dir + "/config.json")) {
      try {
        write_model_preset(preset, dir, 1, DType::f32);
      } catch (const Error&) {
        // Another process may have written it at the same moment; theirs is as good.
        if (!fs::exists(dir + "/config.json")) throw;
      }
    }
    return dir;
  }
  if (is_gguf_path(path)) return converted_model_dir(path, true);
  if (is_llama2c_path(path)) return converted_model_dir(path, false);
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    throw UsageError(fmt::format("model path {} is not a directory (expected a Hugging Face model directory, a .gguf "
                                 "file, a llama2.c .bin file or builtin:<preset> with presets {})",
                                 tandem::quoted(path), join_choices(model_preset_names())));
  }
  if (!fs::exists(fs::path(path) / "config.json")) {
    throw UsageError(fmt::format("model directory {} has no config.json", tandem::quoted(path)));
  }
  return path;
}

}  // namespace tandem
