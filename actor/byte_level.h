// GPT-2's byte-level alphabet (bytes_to_unicode): every byte is shown as a printable
// code point so that BPE vocabularies can be stored as JSON strings. Printable ASCII
// and most of Latin-1 map to themselves; the other 68 bytes (control characters,
// space, 0x7F..0xA0, 0xAD) map to U+0100.. in byte order, so " " is "Ġ" and "\n" "Ċ".
//
// The tokenizer runs BPE on raw bytes and only meets this alphabet when it reads a
// vocabulary, so these conversions happen at load time (and in the decoder's fallback).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::byte_level {

// The code point that stands for `byte`.
char32_t char_of_byte(uint8_t byte);

// The UTF-8 byte-level spelling of raw bytes: "a b" -> "aĠb".
std::string encode(std::string_view bytes);

// The raw bytes a byte-level token spells, or nullopt when it holds a character outside
// the alphabet (or is not well-formed UTF-8), as an added token such as " " or "\n" may.
std::optional<std::string> decode(std::string_view token);

}  // namespace tandem::byte_level
