#include "actor/added_tokens.h"

#include "actor/unicode_text.h"

#include <algorithm>

namespace tandem {

namespace {

// The code point ending at `end` (exclusive), or none for the start or ill-formed bytes.
bool char_before(std::string_view text, size_t end, char32_t* c) {
  size_t start = end;
  while (start > 0 && end - start < 4) {
    --start;
    if ((static_cast<unsigned char>(text[start]) & 0xC0) != 0x80) break;
  }
  if (start == end) return false;
  size_t bad = 0;
  size_t length = unicode::utf8_sequence_length(text, start, &bad);
  if (length != end - start) return false;
  *c = unicode::utf8_decode(text, start, length);
  return true;
}

bool char_at(std::string_view text, size_t pos, char32_t* c, size_t* length) {
  if (pos >= text.size()) return false;
  size_t bad = 0;
  *length = unicode::utf8_sequence_length(text, pos, &bad);
  if (*length == 0) return false;
  *c = unicode::utf8_decode(text, pos, *length);
  return true;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](uint32_t a, uint32_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
  }
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& segments) const {
  size_t kept = 0;  // end of the text already handed out
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& bucket = by_first_byte_[static_cast<uint8_t>(text[pos])];
    const AddedToken* found = nullptr;
    for (uint32_t index : bucket) {
      const std::string& content = tokens_[index].content;
      if (text.compare(pos, content.size(), content) == 0) {
        found = &tokens_[index];
        break;
      }
    }
    if (!found) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + found->content.size();
    pos = stop;  // like HF's non-overlapping search, a rejected match is skipped whole
    char32_t c = 0;
    size_t length = 0;
    if (found->single_word) {
      bool word_before = char_before(text, start, &c) && unicode::is_word_char(c);
      bool word_after = char_at(text, stop, &c, &length) && unicode::is_word_char(c);
      if (word_before || word_after) continue;
    }
    if (found->lstrip) {
      while (start > kept && char_before(text, start, &c) && unicode::is_whitespace(c)) {
        start -= c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
      }
    }
    if (found->rstrip) {
      while (char_at(text, stop, &c, &length) && unicode::is_whitespace(c)) stop += length;
      pos = stop;
    }
    if (start > kept) segments.push_back({kept, start, -1});
    segments.push_back({start, stop, found->id});
    kept = stop;
  }
  if (kept < text.size()) segments.push_back({kept, text.size(), -1});
}

}  // namespace tandem
