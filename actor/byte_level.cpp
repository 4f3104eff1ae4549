#include "actor/byte_level.h"

#include "actor/unicode_text.h"

#include <array>

namespace tandem::byte_level {

namespace {

// The table, built once: byte -> code point, and code point (< 324) -> byte + 1 (0: none).
struct Tables {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int16_t, 324> byte_of_char{};
  Tables() {
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      char32_t c = printable(b) ? static_cast<char32_t>(b) : next++;
      char_of_byte[b] = c;
      byte_of_char[c] = static_cast<int16_t>(b + 1);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else {  // the alphabet stops at U+0143, so two bytes suffice
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace

char32_t char_of_byte(uint8_t byte) { return tables().char_of_byte[byte]; }

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(out, char_of_byte(static_cast<uint8_t>(b)));
  return out;
}

std::optional<std::string> decode(std::string_view token) {
  const Tables& t = tables();
  std::string bytes;
  bytes.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    size_t bad = 0;
    size_t length = unicode::utf8_sequence_length(token, pos, &bad);
    if (length == 0) return std::nullopt;
    char32_t c = unicode::utf8_decode(token, pos, length);
    if (c >= t.byte_of_char.size() || t.byte_of_char[c] == 0) return std::nullopt;
    bytes += static_cast<char>(t.byte_of_char[c] - 1);
    pos += length;
  }
  return bytes;
}

}  // namespace tandem::byte_level
