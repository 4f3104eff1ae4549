#include "actor/unicode_text.h"

#include "core/error.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

namespace tandem::unicode {

size_t utf8_sequence_length(std::string_view text, size_t pos, size_t* bad_length) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte(pos);
  if (lead < 0x80) return 1;
  size_t need;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) low = 0x90;   // no overlong forms
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    *bad_length = 1;  // a stray continuation byte, C0, C1 or F5..FF
    return 0;
  }
  size_t i = 1;
  for (; i <= need && pos + i < text.size(); ++i) {
    unsigned char b = byte(pos + i);
    bool ok = i == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
  }
  if (i == need + 1) return need + 1;
  *bad_length = i;  // the lead plus the continuation bytes that were still plausible
  return 0;
}

char32_t utf8_decode(std::string_view text, size_t pos, size_t length) {
  auto byte = [&](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(text[pos + i])); };
  switch (length) {
    case 1: return byte(0);
    case 2: return ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
    case 3: return ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
    default: return ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) | (byte(3) & 0x3F);
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string text;
  text.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t bad = 0;
    size_t length = utf8_sequence_length(bytes, pos, &bad);
    if (length > 0) {
      text.append(bytes, pos, length);
      pos += length;
    } else {
      text += "\xEF\xBF\xBD";  // U+FFFD
      pos += bad;
    }
  }
  return text;
}

namespace {

const icu::Normalizer2& nfc_instance() {
  static const icu::Normalizer2* instance = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
    TANDEM_CHECK(U_SUCCESS(status) && n, "ICU has no NFC normaliser: {}", u_errorName(status));
    return n;
  }();
  return *instance;
}

bool is_ascii(std::string_view text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

}  // namespace

bool nfc_normalize(std::string_view text, std::string& out) {
  if (is_ascii(text)) return false;  // ASCII is always NFC; most text takes this path
  const icu::Normalizer2& normalizer = nfc_instance();
  icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  UErrorCode status = U_ZERO_ERROR;
  if (normalizer.isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return false;
  status = U_ZERO_ERROR;
  out.clear();
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  normalizer.normalizeUTF8(0, piece, sink, nullptr, status);
  TANDEM_CHECK(U_SUCCESS(status), "ICU NFC normalisation failed: {}", u_errorName(status));
  return true;
}

std::string nfc(std::string_view text) {
  std::string out;
  return nfc_normalize(text, out) ? out : std::string(text);
}

bool is_word_char(char32_t c) {
  if (c == U'_') return true;
  UChar32 u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC)) return true;
  int8_t type = u_charType(u);  // Rust's is_numeric: general categories Nd, Nl, No
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

bool is_whitespace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

}  // namespace tandem::unicode
