// The BPE model: a vocabulary and ranked merges, applied to one pre-tokenized word at a
// time (private to actor/).
//
// Two alphabets, one merge loop:
// - bytes (byte-level BPE: GPT-2, Qwen, Llama-3): each byte of the word is a first
//   symbol. The GPT-2 byte alphabet of tokenizer.json is undone when the vocabulary is
//   loaded (byte_level.h), so encoding never maps text to that alphabet.
// - chars (SentencePiece-style BPE: Llama-2, Mistral): each character is a first symbol;
//   one with no token becomes the <0xNN> tokens of its bytes (byte_fallback), else the
//   unknown token (fused with unknown neighbours when fuse_unk), as Hugging Face's
//   BPE::merge_word does. Bytes that are not well-formed UTF-8 count as unknown
//   characters of one byte each.
// Merges are (left id, right id) -> (rank, merged id), from tokenizer.json's merges list
// or built from llama.cpp's token scores (add_merges_from_scores).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem {

struct BpeMerge {
  int32_t rank;    // lower merges first; equal ranks merge leftmost first
  int32_t new_id;  // the id of the merged symbol
};

class BpeModel {
 public:
  enum class Alphabet { bytes, chars };

  // Adds a vocabulary entry; returns false when that spelling already has an id.
  bool add_token(std::string bytes, int32_t id);
  // The id of a spelling (raw bytes for the byte alphabet, UTF-8 text for chars), or -1.
  int32_t id_of(std::string_view bytes) const;
  // Registers merge `rank` of (left, right) -> merged. A later duplicate of a pair
  // replaces the earlier one, as in Hugging Face's loader.
  void add_merge(int32_t left, int32_t right, int32_t rank, int32_t merged);
  // llama.cpp's SentencePiece merging as merges: every split of every token `t` into two
  // pieces that are tokens (or, for one character, a character that is not a token: llama.cpp
  // starts from characters whatever the vocabulary) merges into t, ranked by t's score,
  // higher first, equal scores at one rank (llama.cpp then takes the leftmost pair).
  // `spellings[id]` is the token's text ("" for none); call after every add_token, chars only.
  void add_merges_from_scores(const std::vector<std::string>& spellings, const std::vector<float>& scores);
  // Call after the last add_merge: builds the lookup table encode_word uses.
  void finish_merges();
  // Byte alphabet: call after the vocabulary is complete; returns the first byte with no id, or -1.
  int find_missing_byte();
  // Char alphabet: call after the vocabulary is complete. `unk_id` -1: unknown characters are
  // dropped (HF without an unk_token). Returns the number of bytes with a <0xNN> token.
  int set_char_alphabet(bool byte_fallback, int32_t unk_id, bool fuse_unk);
  // HF's ignore_merges (Llama-3): a word that is itself in the vocabulary is one token.
  void set_ignore_merges(bool ignore) { ignore_merges_ = ignore; }
  Alphabet alphabet() const { return alphabet_; }

  // Appends the ids of one word (non-empty). Merges the lowest-ranked adjacent pair
  // first, the leftmost on ties, exactly as Hugging Face's Word::merge_all does.
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;

 private:
  struct Symbol {
    int32_t id;
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
    bool live;     // false once merged into its left neighbour
  };

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

  // The first symbols of a word in the char alphabet (none when every character was dropped).
  void char_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  void merge(std::vector<Symbol>& symbols) const;
  void append_symbol_ids(const std::vector<Symbol>& symbols, std::vector<int32_t>& ids) const;

  struct MergeSlot {
    uint64_t key;
    BpeMerge merge;
  };
  static constexpr uint64_t kEmptySlot = ~0ull;  // no pair of ids (< 2^31) has this key

  // Spellings live in spellings_ (a deque: stable addresses), so lookups by string_view
  // never build a std::string.
  std::deque<std::string> spellings_;
  std::unordered_map<std::string_view, int32_t> ids_by_bytes_;
  std::unordered_map<uint64_t, BpeMerge> merges_;  // while loading; then merge_table_
  std::vector<MergeSlot> merge_table_;
  unsigned merge_shift_ = 63;
  size_t merge_mask_ = 0;
  Alphabet alphabet_ = Alphabet::bytes;
  std::array<int32_t, 256> byte_ids_{};  // bytes: each byte's token; chars: its <0xNN> token or -1
  std::array<int32_t, 128> ascii_ids_{};  // chars: each ASCII character's token or -1
  bool byte_fallback_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  // llama.cpp's characters with no token that are part of some token (add_merges_from_scores):
  // symbol ids from unknown_base_ up, which become byte tokens if still alone after merging.
  std::unordered_map<std::string_view, int32_t> unknown_char_ids_;  // views into unknown_chars_
  std::deque<std::string> unknown_chars_;
  int32_t unknown_base_ = 0;
};

}  // namespace tandem
