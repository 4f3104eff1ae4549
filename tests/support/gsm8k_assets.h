// Test-only: what the tests of configs/gsm8k.yaml and docs/gsm8k.md need: the shared
// GSM8K copy (../shared/data/gsm8k), Qwen3's real tokenizer files
// (scripts/fetch_tokenizer_assets.sh) and a small random Qwen3-shaped model made with them.
#pragma once

#include "core/files.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tandem::testing {

inline const std::string kSource = TANDEM_SOURCE_DIR;
inline const std::string kGsm8k = kSource + "/../shared/data/gsm8k";
inline const std::string kQwen3 = kSource + "/build/test-assets/qwen3";

inline void skip_unless_present() {
  std::string missing;
  if (!std::filesystem::exists(kGsm8k + "/train.jsonl")) missing = kGsm8k + " is absent (the shared test data; see its README)";
  if (!std::filesystem::exists(kQwen3 + "/tokenizer.json")) {
    const char* offline = std::getenv("TANDEM_OFFLINE");
    if (!(offline && std::string(offline) == "1")) {
      FAIL(kQwen3, "/tokenizer.json is missing: run scripts/fetch_tokenizer_assets.sh (TANDEM_OFFLINE=1 skips)");
    }
    missing = kQwen3 + " is absent (TANDEM_OFFLINE=1)";
  }
  if (!missing.empty()) {
    std::printf("skipped: %s\n", missing.c_str());
    std::exit(77);
  }
}

// Qwen3's architecture and vocabulary at a size a CPU test trains in seconds.
inline const char* kSmallQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "vocab_size": 151936, "max_position_embeddings": 1024, "rope_theta": 1000000.0,
  "rms_norm_eps": 1e-06, "tie_word_embeddings": true, "hidden_act": "silu",
  "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "float32"
})";

// Writes the small Qwen3 with Qwen3's real tokenizer files into `model` (default
// DIR/model), its shape file into DIR; returns the model's path.
inline std::string small_qwen3(const std::string& dir, std::string model = "") {
  write_file_atomic(dir + "/small_qwen3.json", kSmallQwen3);
  if (model.empty()) model = dir + "/model";
  REQUIRE(run_tandem({"init-model", "--config", dir + "/small_qwen3.json", "--tokenizer", kQwen3, "--out", model},
                     dir + "/init.out")
              .success());
  return model;
}

}  // namespace tandem::testing
