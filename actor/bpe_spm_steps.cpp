#include "actor/bpe_spm_steps.h"

#include "actor/unicode_text.h"

namespace tandem {

namespace {

void replace_all(std::string& text, std::string_view pattern, std::string_view content) {
  if (pattern.empty() || text.find(pattern) == std::string::npos) return;
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  size_t pos = 0;
  for (size_t found; (found = text.find(pattern, pos)) != std::string::npos; pos = found + pattern.size()) {
    out.append(text, pos, found - pos);
    out += content;
  }
  out.append(text, pos);
  text.swap(out);
}

// NFC of each well-formed stretch; ill-formed bytes stay where they are.
void nfc_stretches(std::string& text) {
  std::string out, normalized;
  size_t run = 0, pos = 0;
  bool changed = false;
  auto flush = [&](size_t end) {
    std::string_view stretch = std::string_view(text).substr(run, end - run);
    if (unicode::nfc_normalize(stretch, normalized)) {
      out += normalized;
      changed = true;
    } else {
      out += stretch;
    }
  };
  while (pos < text.size()) {
    size_t bad = 0;
    size_t length = static_cast<unsigned char>(text[pos]) < 0x80 ? 1 : unicode::utf8_sequence_length(text, pos, &bad);
    if (length > 0) {
      pos += length;
      continue;
    }
    flush(pos);
    out.append(text, pos, bad);
    pos += bad;
    run = pos;
  }
  flush(pos);
  if (changed) text.swap(out);
}

// The length of the character at text[pos] (1 for an ill-formed byte).
size_t char_length(std::string_view text, size_t pos) {
  size_t bad = 0;
  size_t length = unicode::utf8_sequence_length(text, pos, &bad);
  return length ? length : 1;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// HF's test for a byte token: six bytes "<0x", two hex digits, ">" (Rust's u8::from_str_radix
// also takes "+" before one digit). The byte, or -1.
int byte_token_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int high = hex_digit(token[3]), low = hex_digit(token[4]);
  if (token[3] == '+' && low >= 0) return low;
  return high >= 0 && low >= 0 ? high * 16 + low : -1;
}

bool well_formed(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t bad = 0;
    size_t length = unicode::utf8_sequence_length(bytes, pos, &bad);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string bytes;
  auto flush = [&] {
    if (bytes.empty()) return;
    if (well_formed(bytes)) {
      out.push_back(bytes);
    } else {
      // Rust: one U+FFFD per byte of an ill-formed run (the JS port, TextDecoder, gives one
      // per maximal ill-formed subpart instead).
      for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    bytes.clear();
  };
  for (std::string& token : tokens) {
    int value = byte_token_value(token);
    if (value >= 0) {
      bytes += static_cast<char>(value);
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  tokens.swap(out);
}

void strip(std::string& token, char32_t c, size_t start, size_t stop) {
  // Character boundaries, as Rust's token.chars().
  std::vector<size_t> starts;
  for (size_t pos = 0; pos < token.size(); pos += char_length(token, pos)) starts.push_back(pos);
  auto is_c = [&](size_t i) {
    size_t end = i + 1 < starts.size() ? starts[i + 1] : token.size();
    size_t bad = 0;
    size_t length = unicode::utf8_sequence_length(token, starts[i], &bad);
    return length == end - starts[i] && unicode::utf8_decode(token, starts[i], length) == c;
  };
  size_t n = starts.size(), start_cut = 0, stop_cut = n;
  for (size_t i = 0; i < start && i < n && is_c(i); ++i) start_cut = i + 1;
  for (size_t i = 0; i < stop && i < n && is_c(n - i - 1); ++i) stop_cut = n - i - 1;
  if (stop_cut <= start_cut) {
    token.clear();
    return;
  }
  size_t begin = start_cut < n ? starts[start_cut] : token.size();
  size_t end = stop_cut < n ? starts[stop_cut] : token.size();
  token = token.substr(begin, end - begin);
}

void metaspace_decode(std::vector<std::string>& tokens, const std::string& replacement, bool prepend) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    // Rust drops every replacement character of the first token (the JS port only a leading one).
    replace_all(tokens[i], replacement, i == 0 && prepend ? "" : " ");
  }
}

}  // namespace

std::string spm_normalize(const std::vector<SpmNormalizerStep>& steps, std::string_view text) {
  std::string out(text);
  for (const SpmNormalizerStep& step : steps) {
    switch (step.kind) {
      case SpmNormalizerStep::Kind::nfc: nfc_stretches(out); break;
      case SpmNormalizerStep::Kind::prepend: if (!out.empty()) out.insert(0, step.content); break;
      case SpmNormalizerStep::Kind::replace: replace_all(out, step.pattern, step.content); break;
    }
  }
  return out;
}

void SpmMetaspace::pre_tokenize(std::string_view piece, bool starts_text, std::vector<std::string_view>& words,
                                std::deque<std::string>& storage) const {
  std::string text(piece);
  replace_all(text, " ", replacement);
  bool add = prepend == Prepend::always || (prepend == Prepend::first && starts_text);
  if (add && text.compare(0, replacement.size(), replacement) != 0) text.insert(0, replacement);
  if (text.empty()) return;
  std::string_view stored = storage.emplace_back(std::move(text));
  if (!split) {
    words.push_back(stored);
    return;
  }
  // HF splits on the replacement with MergedWithNext: each replacement starts a word.
  size_t begin = 0;
  for (size_t found = stored.find(replacement, 1); found != std::string_view::npos; found = stored.find(replacement, found + 1)) {
    if (found > begin) words.push_back(stored.substr(begin, found - begin));
    begin = found;
  }
  words.push_back(stored.substr(begin));
}

std::string spm_decode(const std::vector<SpmDecoderStep>& steps, std::vector<std::string> tokens) {
  for (const SpmDecoderStep& step : steps) {
    switch (step.kind) {
      case SpmDecoderStep::Kind::replace:
        for (std::string& token : tokens) replace_all(token, step.pattern, step.content);
        break;
      case SpmDecoderStep::Kind::byte_fallback: byte_fallback(tokens); break;
      case SpmDecoderStep::Kind::fuse: {
        std::string joined;
        for (const std::string& token : tokens) joined += token;
        tokens.assign(1, std::move(joined));
        break;
      }
      case SpmDecoderStep::Kind::strip:
        for (std::string& token : tokens) strip(token, step.strip_char, step.strip_start, step.strip_stop);
        break;
      case SpmDecoderStep::Kind::metaspace: metaspace_decode(tokens, step.pattern, step.metaspace_prepend); break;
    }
  }
  std::string out;
  for (const std::string& token : tokens) out += token;
  return out;
}

}  // namespace tandem
