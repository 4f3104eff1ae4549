#include "actor/byte_tokenizer.h"

#include "core/error.h"
#include "core/text.h"

#include <algorithm>
#include <numeric>

namespace tandem {

ByteTokenizer::ByteTokenizer(std::vector<std::string> special_tokens) : special_tokens_(std::move(special_tokens)) {
  for (size_t i = 0; i < special_tokens_.size(); ++i) {
    TANDEM_CHECK(!special_tokens_[i].empty(), "special token {} is empty", i);
    for (size_t j = 0; j < i; ++j) {
      TANDEM_CHECK(special_tokens_[i] != special_tokens_[j], "special token {} listed twice", quoted(special_tokens_[i]));
    }
  }
  by_length_.resize(special_tokens_.size());
  std::iota(by_length_.begin(), by_length_.end(), 0);
  std::stable_sort(by_length_.begin(), by_length_.end(),
                   [&](size_t a, size_t b) { return special_tokens_[a].size() > special_tokens_[b].size(); });
}

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    bool matched = false;
    for (size_t s : by_length_) {
      const std::string& token = special_tokens_[s];
      if (text.compare(i, token.size(), token) == 0) {
        ids.push_back(256 + static_cast<int32_t>(s));
        i += token.size();
        matched = true;
        break;
      }
    }
    if (!matched) ids.push_back(static_cast<unsigned char>(text[i++]));
  }
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) {
      throw Error(fmt::format("token {} at position {} is outside the vocabulary [0, {})", id, i, vocab_size()));
    }
    if (id < 256) text += static_cast<char>(id);
    else text += special_tokens_[static_cast<size_t>(id - 256)];
  }
  return text;
}

int32_t ByteTokenizer::special_token_id(const std::string& token) const {
  for (size_t i = 0; i < special_tokens_.size(); ++i)
    if (special_tokens_[i] == token) return 256 + static_cast<int32_t>(i);
  std::string guess = closest_match(token, special_tokens_);
  throw Error(fmt::format("no special token {}{}", quoted(token), guess.empty() ? "" : " (did you mean " + guess + "?)"));
}

}  // namespace tandem
