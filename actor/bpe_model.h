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
  // Call after the last add_merge: builds the lookup table encode_word uses.
  void finish_merges();
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

  // The merge of a pair, or null. Open addressing over one flat array: encoding spends
  // most of its cache misses here, and a node-based map costs two misses per lookup.
  const BpeMerge* find_merge(int32_t left, int32_t right) const {
    uint64_t key = pair_key(left, right);
    for (size_t slot = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;; slot = (slot + 1) & merge_mask_) {
      const MergeSlot& entry = merge_table_[slot];
      if (entry.key == key) return &entry.merge;
      if (entry.key == kEmptySlot) return nullptr;
    }
  }

  struct MergeSlot {
    uint64_t key;
    BpeMerge merge;
  };
  static constexpr uint64_t kEmptySlot = ~0ull;  // no pair of ids (< 2^31) has this key

  std::unordered_map<std::string, int32_t> ids_by_bytes_;
  std::unordered_map<uint64_t, BpeMerge> merges_;  // while loading; then merge_table_
  std::vector<MergeSlot> merge_table_;
  unsigned merge_shift_ = 63;
  size_t merge_mask_ = 0;
  std::array<int32_t, 256> byte_ids_{};
  bool ignore_merges_ = false;
};

}  // namespace tandem
