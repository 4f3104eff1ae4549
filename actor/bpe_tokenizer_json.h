// Reading tokenizer.json (private to actor/): the checked field access both loaders use,
// bpe_tokenizer_json.cpp (the file, the model, added tokens, byte-level steps) and
// bpe_tokenizer_json_spm.cpp (the SentencePiece-style steps). Every error names the
// file, the field and what was found.
#pragma once

#include "actor/bpe_spm_steps.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

class JsonReader {
 public:
  explicit JsonReader(std::string where) : where_(std::move(where)) {}
  const std::string& where() const { return where_; }

  [[noreturn]] void fail(const std::string& what) const;
  // "<field> <what>: tandem reads ... and does not support this"
  [[noreturn]] void unsupported(const std::string& field, const std::string& what) const;

  const nlohmann::json& field(const nlohmann::json& object, const char* key, const std::string& name) const;
  bool flag(const nlohmann::json& object, const char* key, bool fallback, const std::string& name) const;
  std::string string_field(const nlohmann::json& object, const char* key, const std::string& name) const;
  // The "type" of a step object.
  std::string type_of(const nlohmann::json& object, const std::string& name) const;
  // A literal {"String": "..."} pattern (Regex patterns are unsupported).
  std::string string_pattern(const nlohmann::json& step, const std::string& name) const;

 private:
  std::string where_;  // the file, or what stands for it
};

// The SentencePiece-style steps (bpe_tokenizer_json_spm.cpp). `normalizer` and
// `pre_tokenizer` may be null.
std::vector<SpmNormalizerStep> read_spm_normalizer(const JsonReader& in, const nlohmann::json& normalizer);
// False when there is no pre-tokenizer (the whole normalised piece is one word).
bool read_spm_pre_tokenizer(const JsonReader& in, const nlohmann::json& pre_tokenizer, SpmMetaspace& metaspace);
std::vector<SpmDecoderStep> read_spm_decoder(const JsonReader& in, const nlohmann::json& decoder);

}  // namespace tandem
