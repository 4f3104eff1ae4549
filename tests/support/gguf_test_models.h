// Test-only: small random Llama-, Qwen2- and Qwen3-shaped model directories for the GGUF
// tests (tests/actor/test_gguf.cpp, tests/actor/test_gguf_llama_cpp.cpp). Weights are drawn with a
// large spread and random norm scales, so that every weight moves the logits well above
// float32 noise and a misplaced row (the llama q/k permutation) cannot go unnoticed.
#pragma once

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "actor/tokenizer.h"
#include "core/files.h"

#include <filesystem>
#include <string>
#include <vector>

namespace tandem::testing {

inline std::vector<std::string> gguf_test_architectures() { return {"llama", "qwen2", "qwen3"}; }

// Shapes that exercise what each architecture adds: llama with grouped heads and Llama 3
// RoPE scaling (all three bands at head_dim 16), untied; qwen2 with q/k/v biases, tied;
// qwen3 with per-head q/k norms and a head size that is not hidden_size / heads.
inline ModelConfig gguf_test_config(const std::string& architecture) {
  ModelConfig c;
  c.model_type = architecture;
  c.vocab_size = 256 + static_cast<int64_t>(model_preset_special_tokens().size());
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 512;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.eos_token_ids = {256, 258};
  if (architecture == "llama") {
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8192;
  } else if (architecture == "qwen2") {
    c.attention_bias = true;
    c.tie_word_embeddings = true;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1000000.0;
  } else {
    c.qk_norm = true;
    c.head_dim = 32;
    c.rms_norm_eps = 1e-6;
  }
  return c;
}

// Writes a Hugging Face directory (config.json, float32 weights, the presets' byte-level
// tokenizer) for `architecture` at `dir`; returns its config.
inline ModelConfig write_gguf_test_model(const std::string& architecture, const std::string& dir, uint64_t seed) {
  const ModelConfig config = gguf_test_config(architecture);
  std::filesystem::create_directories(dir);
  write_file_atomic(dir + "/config.json", model_config_to_json(config));
  save_model_weights(dir, random_model_weights(config, seed, 0.15, /*random_norms=*/true), DType::f32);
  write_byte_level_tokenizer(dir, model_preset_special_tokens());
  return read_model_config(dir + "/config.json");
}

}  // namespace tandem::testing
