// Built-in model presets and `builtin:` model paths.
//
// A preset is a complete Hugging Face-format directory (config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json) with seeded random weights and a byte-level
// vocabulary: what tests and the quickstart train, and what `tandem init-model` writes.
#pragma once

#include "actor/model_config.h"
#include "core/safetensors.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

std::vector<std::string> model_preset_names();  // "tiny", "small", "tiny-tools"
// The preset's architecture (Qwen3 family, byte-level vocabulary). Error with the choices otherwise.
ModelConfig model_preset_config(const std::string& preset);
// The special tokens of every preset's tokenizer, ids 256, 257, ... in this order.
std::vector<std::string> model_preset_special_tokens();
// A preset's own: those above, then for "tiny-tools" (tiny's shape, for tool-use demos)
// the Hermes tool tokens <tool_call>, </tool_call>, <tool_response>, </tool_response>.
std::vector<std::string> model_preset_special_tokens(const std::string& preset);

// Writes the preset to `out_dir` (created; it must not exist or be empty). Files appear
// whole or not at all: everything is written to a sibling temporary directory first.
void write_model_preset(const std::string& preset, const std::string& out_dir, uint64_t seed, DType dtype);

// A model path as users write it: "builtin:<preset>" becomes a directory under the
// model cache (env TANDEM_CACHE_DIR, else $XDG_CACHE_HOME/tandem, else ~/.cache/tandem),
// written on first use with seed 1; a .gguf file (actor/gguf_model.h) or a llama2.c .bin
// (actor/llama2c.h) becomes a Hugging Face directory under the same cache, converted once
// and named by the file's checksum; anything else must be a directory with a config.json.
// Errors name the path and what is missing or wrong in the file.
std::string resolve_model_path(const std::string& path);

}  // namespace tandem
