// Hugging Face tokenizer.json BPE: byte-level (Qwen2/Qwen3, Llama-3, GPT-2) and
// SentencePiece-style (Llama-2, Mistral, TinyLlama).
//
// encode(): added tokens are cut out of the raw text first; the rest is normalised, cut
// into words by the pre-tokenizer and each word becomes ids by ranked merges.
// - Byte-level: NFC (when the file asks for it), the pre-tokenizer regex, merges over the
//   word's bytes. decode(): the bytes of the ids, read as UTF-8 with each ill-formed part
//   replaced by U+FFFD, as HF's ByteLevel decoder does.
// - SentencePiece-style (a file with no ByteLevel step): the normaliser's Prepend("▁") and
//   Replace(" " -> "▁") (older files) or the Metaspace pre-tokenizer (newer ones), merges
//   over the word's characters, a character with no token becoming its <0xNN> byte tokens
//   (byte_fallback) or the unknown token. decode(): the decoder steps (Replace "▁" -> " ",
//   ByteFallback, Fuse, Strip; or Metaspace) over the tokens' text (bpe_spm_steps.h).
//
// Differences from HF, on purpose:
// - encode() is HF's encode(text, add_special_tokens=False): the post-processor (Llama-2
//   and Llama-3 prepend their BOS) is not applied; chat templates put those tokens in.
// - decode() keeps special tokens and never runs transformers' clean_up_tokenization_spaces.
// - HF cannot take ill-formed UTF-8. Byte-level: each ill-formed byte is a word of its own
//   (its byte token) and the well-formed runs around it are tokenized as usual.
//   SentencePiece-style: each ill-formed byte is an unknown character (its <0xNN> token).
// Anything in tokenizer.json that would make the result differ from HF (another model
// type, an unknown normaliser or pre-tokenizer, BPE dropout...) is an Error naming the
// file and the field, never a silently different tokenizer.
//
// Thread-safe: encode() may run on several threads; each word's ids are cached, and a
// thread that finds the cache busy works without it rather than wait.
#pragma once

#include "actor/tokenizer.h"

#include <memory>

namespace tandem {

class BpeTokenizer final : public Tokenizer {
 public:
  // Reads a tokenizer.json; throws Error naming the file and what is unsupported or malformed.
  static std::unique_ptr<BpeTokenizer> from_file(const std::string& tokenizer_json_path);
  // From tables an actor/ loader filled (bpe_tokenizer_state.h).
  struct State;
  static std::unique_ptr<BpeTokenizer> from_state(std::unique_ptr<State> state);
  ~BpeTokenizer() override;

  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int32_t vocab_size() const override;
  std::optional<int32_t> token_to_id(const std::string& token) const override;

 private:
  explicit BpeTokenizer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tandem
