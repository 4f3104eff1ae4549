// The tokenizer interface the rest of tandem uses (rollout, controller, tools).
//
// Implementations: ByteTokenizer (built-in synthetic tasks) and BpeTokenizer
// (Hugging Face tokenizer.json BPE: byte-level as Qwen2/Qwen3 and Llama-3, SentencePiece-
// style as Llama-2 and Mistral). Every model directory tandem writes or reads carries a
// tokenizer.json; load_tokenizer() reads it (tokenizer_from_gguf, in
// actor/bpe_tokenizer_gguf.h, reads the one inside a GGUF file).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Special/added tokens in the text are matched first and become their own ids.
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Throws Error naming the position and id when an id is outside the vocabulary.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // Number of ids the tokenizer can produce (vocabulary plus added tokens).
  virtual int32_t vocab_size() const = 0;
  // The id of an exact token string (special or regular), if it has one.
  virtual std::optional<int32_t> token_to_id(const std::string& token) const = 0;
};

// Reads DIR/tokenizer.json (and DIR/tokenizer_config.json when present). Errors name
// the file and what in it is unsupported or malformed.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir);

// Writes tokenizer.json + tokenizer_config.json for a byte-level vocabulary: ids 0..255
// are the bytes (through the GPT-2 byte-to-unicode table, no merges), then the special
// tokens in order. Hugging Face loads it, and it encodes exactly as ByteTokenizer does.
void write_byte_level_tokenizer(const std::string& model_dir, const std::vector<std::string>& special_tokens);

}  // namespace tandem
