// The text steps of SentencePiece-style BPE tokenizer.json files (Llama-2, Mistral,
// TinyLlama), private to actor/: the normalizer (Prepend "▁", Replace " " -> "▁", NFC),
// the Metaspace pre-tokenizer, and the decoders (Replace, ByteFallback, Fuse, Strip,
// Metaspace). Each does what Hugging Face's Rust implementation of that step does; the
// comments say where its JS port differs.
//
// Text may hold bytes that are not well-formed UTF-8 (HF's never does): the steps leave
// such bytes as they are, and NFC runs on the well-formed stretches between them.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

struct SpmNormalizerStep {
  enum class Kind { nfc, prepend, replace };
  Kind kind = Kind::nfc;
  std::string pattern;  // replace: the literal text to find
  std::string content;  // prepend: what goes in front (of non-empty text); replace: the replacement
};

// The steps in order.
std::string spm_normalize(const std::vector<SpmNormalizerStep>& steps, std::string_view text);

// HF's Metaspace pre-tokenizer: spaces become `replacement`; a piece not starting with it
// gets one in front (prepend_scheme always; first: only the piece that starts the text;
// never); with `split`, a word starts at each replacement character.
struct SpmMetaspace {
  enum class Prepend { always, first, never };
  std::string replacement = "\xE2\x96\x81";  // U+2581 "▁"
  Prepend prepend = Prepend::always;
  bool split = true;

  // `starts_text`: the piece begins at offset 0 of the original text (HF's test for "first").
  void pre_tokenize(std::string_view piece, bool starts_text, std::vector<std::string_view>& words,
                    std::deque<std::string>& storage) const;
};

struct SpmDecoderStep {
  enum class Kind { replace, byte_fallback, fuse, strip, metaspace };
  Kind kind = Kind::fuse;
  std::string pattern;           // replace: the literal text; metaspace: the replacement character
  std::string content;           // replace: what it becomes
  char32_t strip_char = U' ';    // strip: the character removed
  size_t strip_start = 0;        // strip: at most this many from the start
  size_t strip_stop = 0;         // strip: at most this many from the end
  bool metaspace_prepend = true;  // metaspace: prepend_scheme is not "never" (drop the first token's ▁s)
};

// HF's decode_chain of every step in order, then the tokens joined.
std::string spm_decode(const std::vector<SpmDecoderStep>& steps, std::vector<std::string> tokens);

}  // namespace tandem
