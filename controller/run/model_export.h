// Writing a model in another format: what `tandem export` and `tandem convert` share.
//
// Formats: "hf" (a Hugging Face directory: config.json, model.safetensors, the tokenizer
// files) and "gguf" (one llama.cpp file, actor/gguf_model.h). Dtypes: f32, f16, bf16 (also
// spelled float32, float16, bfloat16) and, for gguf only, q8_0.
#pragma once

#include <string>

namespace tandem {

// Writes the Hugging Face model directory `model_dir` as `format` in `dtype` at `out` (a
// directory for hf, which must not exist or be empty; a file for gguf, which must not
// exist). Written whole or not at all. A bad format, dtype or `out` is a UsageError.
// Returns a one-line summary of what was written.
std::string export_model_dir(const std::string& model_dir, const std::string& format, const std::string& dtype,
                             const std::string& out);

// Throws UsageError unless `format` and `dtype` are a pair export_model_dir writes, and
// `out` is free (checked before anything slow is done).
void check_export_target(const std::string& format, const std::string& dtype, const std::string& out);

}  // namespace tandem
