// UTF-8 and Unicode helpers for the BPE tokenizer (private to actor/).
//
// Hugging Face tokenizers work on Rust strings, so their input is always valid UTF-8.
// Ours is a std::string that may hold any bytes; these helpers let the tokenizer find
// the well-formed runs (which get the HF treatment) and decode bytes back to text the
// way Rust's String::from_utf8_lossy does. ICU stays inside unicode_text.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::unicode {

// Length (1..4) of the well-formed UTF-8 sequence starting at text[pos], or 0 when the
// bytes there are ill-formed; *bad_length is then the length of the maximal ill-formed
// subpart (Unicode's "substitution of maximal subparts", which Rust and WHATWG use).
size_t utf8_sequence_length(std::string_view text, size_t pos, size_t* bad_length);

// The code point of the well-formed sequence at text[pos] of length `length`.
char32_t utf8_decode(std::string_view text, size_t pos, size_t length);

// The bytes as text, each maximal ill-formed subpart replaced by U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// NFC of well-formed UTF-8. Returns false (and leaves `out` alone) when the text is
// already in NFC, which is the common case and costs no copy.
bool nfc_normalize(std::string_view text, std::string& out);
std::string nfc(std::string_view text);

// Rust's char::is_alphanumeric() || c == '_' (the "word" test of added single_word tokens).
bool is_word_char(char32_t c);
// Rust's char::is_whitespace(): the Unicode White_Space property.
bool is_whitespace(char32_t c);

}  // namespace tandem::unicode
