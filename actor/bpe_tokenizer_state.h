// What a BpeTokenizer holds once tokenizer.json is read (private to actor/): the
// loader (bpe_tokenizer_json.cpp) fills it, bpe_tokenizer.cpp encodes and decodes with it.
#pragma once

#include "actor/added_tokens.h"
#include "actor/bpe_model.h"
#include "actor/bpe_pretokenize.h"
#include "actor/bpe_tokenizer.h"

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tandem {

struct BpeTokenizer::State {
  std::string path;                 // the tokenizer.json, for messages
  bool nfc = false;                 // normalizer: NFC (Qwen) or none (Llama-3, GPT-2)
  AddedTokenMatcher raw_added;      // added tokens with normalized=false: matched in the raw text
  AddedTokenMatcher normalized_added;  // normalized=true: matched after normalisation
  PreTokenizer pre_tokenizer;
  BpeModel model;

  // Decoding: the bytes each id stands for (HF's ByteLevel decoder maps a token through
  // the byte alphabet, or takes its UTF-8 as it is when a character is outside it).
  std::vector<std::string> id_bytes;
  std::vector<uint8_t> id_known;    // ids may have gaps; 0 marks one
  int32_t vocab_size = 0;           // highest id + 1, added tokens included

  // token_to_id: added tokens by content; vocabulary entries outside the byte alphabet
  // (the rest are found through model.id_of).
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

}  // namespace tandem
