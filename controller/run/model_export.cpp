#include "controller/run/model_export.h"

#include "actor/gguf_model.h"
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "core/error.h"
#include "core/files.h"
#include "core/safetensors.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

namespace tandem {

namespace fs = std::filesystem;

namespace {

// The files beside the weights that make a directory a usable model (learner/trainer_checkpoint.cpp
// copies the same set).
constexpr const char* tokenizer_files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                           "generation_config.json"};

struct ExportDType {
  DType safetensors;
  GgufTensorType gguf;
  const char* torch_dtype;
};

ExportDType parse_dtype(const std::string& format, const std::string& name) {
  if (name == "f32" || name == "float32") return {DType::f32, GgufTensorType::gguf_f32, "float32"};
  if (name == "f16" || name == "float16") return {DType::f16, GgufTensorType::gguf_f16, "float16"};
  if (name == "bf16" || name == "bfloat16") return {DType::bf16, GgufTensorType::gguf_bf16, "bfloat16"};
  if (name == "q8_0" && format == "gguf") return {DType::f32, GgufTensorType::gguf_q8_0, "float32"};
  throw UsageError(fmt::format("--dtype {}: allowed for {}: f32, f16, bf16{}", name, format,
                               format == "gguf" ? ", q8_0" : " (q8_0 is for --format gguf)"));
}

}  // namespace

void check_export_target(const std::string& format, const std::string& dtype, const std::string& out) {
  if (format != "hf" && format != "gguf") throw UsageError(fmt::format("format {}: allowed: hf, gguf", format));
  parse_dtype(format, dtype);
  std::error_code ec;
  if (format == "hf" && fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec))) {
    throw UsageError(fmt::format("{} exists and is not an empty directory; choose another output", out));
  }
  if (format == "gguf" && fs::exists(out, ec)) throw UsageError(fmt::format("{} exists; choose another output", out));
}

std::string export_model_dir(const std::string& model_dir, const std::string& format, const std::string& dtype_name,
                             const std::string& out) {
  check_export_target(format, dtype_name, out);
  const ExportDType dtype = parse_dtype(format, dtype_name);
  ModelConfig config = read_model_config(model_dir + "/config.json");
  const ModelWeights weights = load_model_weights(model_dir, config);
  const std::string summary = fmt::format("{} ({} parameters, {})", config.model_type, weights.parameter_count(), dtype_name);
  if (format == "gguf") {
    if (!fs::path(out).parent_path().empty()) fs::create_directories(fs::path(out).parent_path());
    write_gguf_model(out, config, weights, model_dir, dtype.gguf);
    return summary;
  }
  config.torch_dtype = dtype.torch_dtype;
  const std::string staging = out + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(staging, ec);
  try {
    fs::create_directories(staging);
    write_file_atomic(staging + "/config.json", model_config_to_json(config));
    save_model_weights(staging, weights, dtype.safetensors);
    for (const char* name : tokenizer_files) {
      if (fs::exists(fs::path(model_dir) / name)) fs::copy_file(fs::path(model_dir) / name, fs::path(staging) / name);
    }
    if (fs::exists(out)) fs::remove(out);  // empty, checked above
    fs::rename(staging, out);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(staging, ec);
    throw Error(fmt::format("cannot write {}: {}", out, e.what()));
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
  return summary;
}

}  // namespace tandem
