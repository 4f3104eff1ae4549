// `tandem init-model (--preset tiny|small | --config config.json [--tokenizer DIR]) --out DIR`:
// a random-weight Hugging Face model directory, of a preset's shape or of any supported
// config.json's (a Qwen3-0.6B-shaped model for load-time and memory measurements, or a
// small Qwen3 with Qwen3's real tokenizer for tests).
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "actor/tokenizer.h"
#include "controller/cli/cli.h"
#include "core/error.h"
#include "core/files.h"
#include "core/safetensors.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

namespace tandem {

namespace {

namespace fs = std::filesystem;

// Writes the model of `config_json`'s shape into `out_dir` (which must not hold files),
// through a staging directory so that a failure leaves nothing half-written.
void write_model_from_config(const InitModelArgs& args, DType dtype) {
  ModelConfig config = read_model_config(args.config_json);
  if (fs::exists(args.out_dir) && !fs::is_empty(args.out_dir)) {
    throw UsageError(fmt::format("--out: {} exists and is not empty", args.out_dir));
  }
  const std::string staging = args.out_dir + ".tmp";
  std::error_code ec;
  fs::remove_all(staging, ec);
  try {
    fs::create_directories(staging);
    if (args.tokenizer_dir.empty()) {
      write_byte_level_tokenizer(staging, model_preset_special_tokens());
    } else {
      for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
        const fs::path from = fs::path(args.tokenizer_dir) / name;
        if (fs::exists(from)) fs::copy_file(from, fs::path(staging) / name);
      }
      if (!fs::exists(fs::path(staging) / "tokenizer.json")) {
        throw UsageError(fmt::format("--tokenizer: {} has no tokenizer.json", args.tokenizer_dir));
      }
    }
    // The tokenizer must fit the embedding: a config.json with fewer rows than ids is wrong.
    const int64_t tokenizer_ids = load_tokenizer(staging)->vocab_size();
    if (tokenizer_ids > config.vocab_size) {
      throw UsageError(fmt::format("{}: vocab_size {} is smaller than the tokenizer's {} ids", args.config_json,
                                   config.vocab_size, tokenizer_ids));
    }
    // config.json says what model.safetensors holds, whatever the shape's file said.
    config.torch_dtype = dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32";
    write_file_atomic(staging + "/config.json", model_config_to_json(config));
    save_model_weights(staging, random_model_weights(config, static_cast<uint64_t>(args.seed)), dtype);
    if (fs::exists(args.out_dir)) fs::remove(args.out_dir);
    fs::rename(staging, args.out_dir);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(staging, ec);
    throw Error(fmt::format("cannot write model {}: {}", args.out_dir, e.what()));
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
}

}  // namespace

int cli_init_model(const InitModelArgs& args) {
  const DType dtype = args.dtype == "bfloat16" ? DType::bf16 : args.dtype == "float16" ? DType::f16 : DType::f32;
  if (args.preset.empty() == args.config_json.empty()) throw UsageError("init-model: give --preset or --config");
  if (!args.tokenizer_dir.empty() && args.config_json.empty()) {
    throw UsageError("init-model: --tokenizer goes with --config (a preset has its own tokenizer)");
  }
  ModelConfig config;
  std::string shape;
  if (!args.preset.empty()) {
    write_model_preset(args.preset, args.out_dir, static_cast<uint64_t>(args.seed), dtype);
    config = model_preset_config(args.preset);
    shape = args.preset + " preset";
  } else {
    write_model_from_config(args, dtype);
    config = read_model_config(args.out_dir + "/config.json");
    shape = "shape of " + args.config_json;
  }
  std::printf("wrote %s: %s (%s, %lld parameters, %s, seed %lld): config.json, model.safetensors, "
              "tokenizer.json, tokenizer_config.json\n",
              args.out_dir.c_str(), shape.c_str(), config.model_type.c_str(),
              static_cast<long long>(parameter_count(config)), args.dtype.c_str(), static_cast<long long>(args.seed));
  return 0;
}

}  // namespace tandem
