// Byte-level tokenizer for the built-in synthetic tasks: ids 0..255 are the bytes of
// the text (any bytes, UTF-8 or not, round-trip exactly), ids 256.. the special tokens
// in the order given. Special tokens are matched in the text before bytes, longest
// first, so "<|im_end|>" is one token, not ten.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

class ByteTokenizer {
 public:
  explicit ByteTokenizer(std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});

  std::vector<int32_t> encode(const std::string& text) const;
  // Throws Error naming the position and id when an id is outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;
  int32_t vocab_size() const { return 256 + static_cast<int32_t>(special_tokens_.size()); }
  // The id of a special token; throws Error (with a did-you-mean) when unknown.
  int32_t special_token_id(const std::string& token) const;
  const std::vector<std::string>& special_tokens() const { return special_tokens_; }

 private:
  std::vector<std::string> special_tokens_;
  std::vector<size_t> by_length_;  // indices into special_tokens_, longest first
};

}  // namespace tandem
