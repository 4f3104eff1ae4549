// What a BpeTokenizer holds once tokenizer.json is read (private to actor/): the
// loader (bpe_tokenizer_json.cpp) fills it, bpe_tokenizer.cpp encodes and decodes with it.
#pragma once

#include "actor/added_tokens.h"
#include "actor/bpe_model.h"
#include "actor/bpe_pretokenize.h"
#include "actor/bpe_spm_steps.h"
#include "actor/bpe_tokenizer.h"

#include <nlohmann/json_fwd.hpp>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tandem {

struct BpeTokenizer::State {
  std::string path;                 // the tokenizer.json, for messages
  // SentencePiece-style BPE (Llama-2, Mistral): characters as first symbols, the spm_*
  // steps below; false: byte-level BPE (the GPT-2 byte alphabet, `nfc` and `pre_tokenizer`).
  bool char_level = false;
  bool nfc = false;                 // byte-level normalizer: NFC (Qwen) or none (Llama-3, GPT-2)
  AddedTokenMatcher raw_added;      // added tokens with normalized=false: matched in the raw text
  AddedTokenMatcher normalized_added;  // normalized=true: matched after normalisation
  PreTokenizer pre_tokenizer;       // byte-level
  BpeModel model;

  // Char-level steps: normalizer, Metaspace pre-tokenizer (when has_metaspace; else each
  // normalised piece is one word) and decoder.
  std::vector<SpmNormalizerStep> spm_normalizer;
  bool has_metaspace = false;
  SpmMetaspace metaspace;
  std::vector<SpmDecoderStep> spm_decoder;
  // No token has "▁" after another character (SentencePiece's pieces start at a "▁"), and "▁"
  // is a token: then no merge crosses the place before a "▁" that follows another
  // character, and cutting a word there gives the same ids, with words short enough to cache.
  bool spm_cut_before_meta = false;

  // Decoding. Byte-level: the bytes each id stands for (HF's ByteLevel decoder maps a token
  // through the byte alphabet, or takes its UTF-8 as it is when a character is outside it).
  // Char-level: the token's text, which the decoder steps turn into text.
  std::vector<std::string> id_bytes;
  std::vector<uint8_t> id_known;    // ids may have gaps; 0 marks one
  int32_t vocab_size = 0;           // highest id + 1, added tokens included

  // token_to_id: added tokens by content; byte-level vocabulary entries outside the byte
  // alphabet (the rest, and every char-level entry, are found through model.id_of).
  std::unordered_map<std::string, int32_t> added_ids;
  std::unordered_map<std::string, int32_t> unmapped_vocab_ids;

  // Word -> ids. Bounded: cleared when full (HF keeps a bounded cache too). Guarded by
  // cache_mutex, which encode() only try-locks so concurrent callers never queue.
  static constexpr size_t kCacheMaxWords = 1 << 16;
  static constexpr size_t kCacheMaxWordBytes = 256;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;
};

// Reads and validates a tokenizer.json (see bpe_tokenizer.h for what is supported).
std::unique_ptr<BpeTokenizer::State> load_bpe_tokenizer_state(const std::string& path);

// The same from parsed JSON; `where` stands for the file in errors. With `scores` (one per
// id: llama.cpp's SentencePiece scores), the merges are built from them as llama.cpp
// merges (BpeModel::add_merges_from_scores) and model.merges is not read.
std::unique_ptr<BpeTokenizer::State> load_bpe_tokenizer_state(const nlohmann::json& root, const std::string& where,
                                                              const std::vector<float>* scores = nullptr);

}  // namespace tandem
