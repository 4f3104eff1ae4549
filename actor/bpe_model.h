// The BPE model of a byte-level tokenizer: a vocabulary of byte strings and ranked
// merges, applied to one pre-tokenized word at a time (private to actor/).
//
// Works on raw bytes: the GPT-2 byte alphabet of tokenizer.json is undone when the
// vocabulary is loaded (byte_level.h), so encoding never maps text to that alphabet.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem {

struct BpeMerge {
  int32_t rank;    // position in the merges list: lower merges first
  int32_t new_id;  // the id of the merged symbol
};

class BpeModel {
 public:
  // Adds a vocabulary entry; returns false when those bytes already have an id.
  bool add_token(std::string bytes, int32_t id);
  // The id of a byte string, or -1.
  int32_t id_of(std::string_view bytes) const;
  // Registers merge `rank` of (left, right) -> merged. A later duplicate of a pair
  // replaces the earlier one, as in Hugging Face's loader.
  void add_merge(int32_t left, int32_t right, int32_t rank, int32_t merged);
  // Call after the vocabulary is complete; returns the first byte with no id, or -1.
  int find_missing_byte();
  // HF's ignore_merges (Llama-3): a word that is itself in the vocabulary is one token.
  void set_ignore_merges(bool ignore) { ignore_merges_ = ignore; }

  // Appends the ids of one word (non-empty). Merges the lowest-ranked adjacent pair
  // first, the leftmost on ties, exactly as Hugging Face's Word::merge_all does.
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;

 private:
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  std::unordered_map<std::string, int32_t> ids_by_bytes_;
  std::unordered_map<uint64_t, BpeMerge> merges_;
  std::array<int32_t, 256> byte_ids_{};
  bool ignore_merges_ = false;
};

}  // namespace tandem
