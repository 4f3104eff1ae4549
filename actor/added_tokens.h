// Added (special) tokens: found in the text before anything else, so "<|im_end|>" is
// one id and never reaches the regex or BPE (private to actor/).
//
// Follows Hugging Face's AddedVocabulary: leftmost-longest matching; a single_word
// token only counts with no word character (alphanumeric or '_') on either side; lstrip
// and rstrip make the token swallow the whitespace before or after it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched in the normalised text rather than the raw text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }

  struct Segment {
    size_t begin, end;  // byte range in the text
    int32_t id;         // the added token, or -1 for text between tokens
  };
  // Cuts `text` into added tokens and the (non-empty) text between them.
  void split(std::string_view text, std::vector<Segment>& segments) const;

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace tandem
