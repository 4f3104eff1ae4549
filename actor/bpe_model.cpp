#include "actor/bpe_model.h"

#include "actor/unicode_text.h"

#include <algorithm>
#include <queue>

namespace tandem {

bool BpeModel::add_token(std::string bytes, int32_t id) {
  if (ids_by_bytes_.count(bytes)) return false;
  ids_by_bytes_.emplace(spellings_.emplace_back(std::move(bytes)), id);
  return true;
}

int32_t BpeModel::id_of(std::string_view bytes) const {
  auto it = ids_by_bytes_.find(bytes);
  return it == ids_by_bytes_.end() ? -1 : it->second;
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  merges_[pair_key(left, right)] = BpeMerge{rank, merged};
}

void BpeModel::add_merges_from_scores(const std::vector<std::string>& spellings, const std::vector<float>& scores) {
  // Dense ranks of the scores, highest first: equal scores share a rank.
  std::vector<float> distinct(scores.begin(), scores.end());
  std::sort(distinct.begin(), distinct.end(), std::greater<float>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  auto rank_of = [&](int32_t id) {
    return static_cast<int32_t>(std::lower_bound(distinct.begin(), distinct.end(), scores[id], std::greater<float>()) -
                                distinct.begin());
  };
  unknown_base_ = static_cast<int32_t>(spellings.size());
  // A piece's symbol: its token, or for one character with no token an id of its own.
  auto piece_id = [&](std::string_view piece) -> int32_t {
    int32_t id = id_of(piece);
    if (id >= 0) return id;
    size_t bad = 0;
    if (unicode::utf8_sequence_length(piece, 0, &bad) != piece.size()) return -1;
    auto it = unknown_char_ids_.find(piece);
    if (it != unknown_char_ids_.end()) return it->second;
    int32_t unknown = unknown_base_ + static_cast<int32_t>(unknown_chars_.size());
    unknown_char_ids_.emplace(unknown_chars_.emplace_back(piece), unknown);
    return unknown;
  };
  for (const std::string& spelling : spellings) {
    if (spelling.empty()) continue;
    int32_t merged = id_of(spelling);  // llama.cpp's text_to_token: the last id of a repeated spelling
    if (merged < 0 || static_cast<size_t>(merged) >= scores.size()) continue;
    size_t pos = 0;
    while (pos < spelling.size()) {
      size_t bad = 0;
      size_t length = unicode::utf8_sequence_length(spelling, pos, &bad);
      pos += length ? length : bad;
      if (pos >= spelling.size()) break;
      std::string_view text(spelling);
      int32_t left = piece_id(text.substr(0, pos));
      if (left < 0) continue;
      int32_t right = piece_id(text.substr(pos));
      if (right >= 0) add_merge(left, right, rank_of(merged), merged);
    }
  }
}

void BpeModel::finish_merges() {
  merge_table_.clear();
  if (merges_.empty()) return;  // encode_word then skips merging altogether
  size_t capacity = 2;  // a power of two, at most half full so that probes stay short
  unsigned bits = 1;
  while (capacity < 2 * merges_.size()) capacity <<= 1, ++bits;
  merge_table_.assign(capacity, MergeSlot{kEmptySlot, BpeMerge{0, 0}});
  merge_shift_ = 64 - bits;
  merge_mask_ = capacity - 1;
  for (const auto& [key, merge] : merges_) {
    size_t slot = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;
    while (merge_table_[slot].key != kEmptySlot) slot = (slot + 1) & merge_mask_;
    merge_table_[slot] = {key, merge};
  }
  std::unordered_map<uint64_t, BpeMerge>().swap(merges_);
}

int BpeModel::find_missing_byte() {
  alphabet_ = Alphabet::bytes;
  int missing = -1;
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = id_of(std::string(1, static_cast<char>(b)));
    if (byte_ids_[b] < 0 && missing < 0) missing = b;
  }
  return missing;
}

int BpeModel::set_char_alphabet(bool byte_fallback, int32_t unk_id, bool fuse_unk) {
  alphabet_ = Alphabet::chars;
  byte_fallback_ = byte_fallback;
  unk_id_ = unk_id;
  fuse_unk_ = fuse_unk;
  int found = 0;
  for (int b = 0; b < 256; ++b) {
    // HF spells them format!("<{b:#04X}>"): "<0x0A>", upper-case hex digits.
    static const char kHex[] = "0123456789ABCDEF";
    const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    byte_ids_[b] = byte_fallback ? id_of(std::string_view(name, sizeof(name))) : -1;
    found += byte_ids_[b] >= 0;
    if (b < 128) ascii_ids_[b] = id_of(std::string(1, static_cast<char>(b)));
  }
  return found;
}

void BpeModel::char_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  int32_t unk = -1;  // an unknown token not yet added (fuse_unk may grow it)
  auto add = [&](int32_t id) {
    int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, true});
  };
  auto flush_unk = [&] {
    if (unk >= 0) add(unk);
    unk = -1;
  };
  size_t pos = 0;
  while (pos < word.size()) {
    auto byte = static_cast<uint8_t>(word[pos]);
    size_t bad = 0;
    size_t length = byte < 0x80 ? 1 : unicode::utf8_sequence_length(word, pos, &bad);
    if (length == 0) length = 1;  // an ill-formed byte: an unknown character of its own
    std::string_view c = word.substr(pos, length);
    pos += length;
    int32_t id = byte < 0x80 ? ascii_ids_[byte] : (bad ? -1 : id_of(c));
    if (id < 0 && !bad && !unknown_char_ids_.empty()) {
      auto it = unknown_char_ids_.find(c);
      if (it != unknown_char_ids_.end()) id = it->second;
    }
    if (id >= 0) {
      flush_unk();
      add(id);
      continue;
    }
    if (byte_fallback_ && std::all_of(c.begin(), c.end(), [&](char b) { return byte_ids_[static_cast<uint8_t>(b)] >= 0; })) {
      // As HF's merge_word: byte tokens go in without first adding a pending unknown token.
      for (char b : c) add(byte_ids_[static_cast<uint8_t>(b)]);
      continue;
    }
    if (unk_id_ < 0) continue;  // no unknown token: HF drops the character
    if (unk >= 0 && !fuse_unk_) add(unk);
    unk = unk_id_;
  }
  flush_unk();
  if (!symbols.empty()) {
    for (size_t i = 0; i + 1 < symbols.size(); ++i) symbols[i].next = static_cast<int32_t>(i + 1);
  }
}

namespace {

struct Candidate {
  int32_t rank;
  int32_t pos;    // index of the left symbol
  int32_t left;   // the pair it merges, as it was when queued
  int32_t right;
  int32_t new_id;
  // std::priority_queue pops the largest: make that the lowest rank, then leftmost.
  bool operator<(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : pos > other.pos;
  }
};

}  // namespace

void BpeModel::merge(std::vector<Symbol>& symbols) const {
  const auto n = static_cast<int32_t>(symbols.size());
  if (n < 2 || merge_table_.empty()) return;
  std::vector<Candidate> storage;
  storage.reserve(static_cast<size_t>(n));
  std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(storage));
  auto push_pair = [&](int32_t pos) {
    int32_t left = symbols[pos].id, right = symbols[symbols[pos].next].id;
    if (const BpeMerge* merge = find_merge(left, right)) queue.push({merge->rank, pos, left, right, merge->new_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.live || left.next < 0) continue;
    // Entries go stale when a neighbour merged first. HF keeps an entry when the pair
    // there now still merges into the same symbol; symbols only grow, so a changed pair
    // always spells a longer string, and that test is the same as the pair being unchanged.
    // (llama.cpp's test, that the two symbols still have the lengths they had, is the same too.)
    if (left.id != top.left || symbols[left.next].id != top.right) continue;
    Symbol& right = symbols[left.next];
    left.id = top.new_id;
    right.live = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    if (left.next >= 0) push_pair(top.pos);
  }
}

void BpeModel::append_symbol_ids(const std::vector<Symbol>& symbols, std::vector<int32_t>& ids) const {
  if (symbols.empty()) return;
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    int32_t id = symbols[i].id;
    if (unknown_chars_.empty() || id < unknown_base_) {
      ids.push_back(id);
      continue;
    }
    // llama.cpp's resegment: a character with no token that merged with nothing is its bytes.
    for (char b : unknown_chars_[static_cast<size_t>(id - unknown_base_)]) {
      int32_t byte_id = byte_ids_[static_cast<uint8_t>(b)];
      if (byte_id >= 0) ids.push_back(byte_id);
      else if (unk_id_ >= 0) ids.push_back(unk_id_);
    }
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (ignore_merges_ && word.size() > 1) {
    int32_t whole = id_of(word);
    if (whole >= 0) {
      ids.push_back(whole);
      return;
    }
  }
  std::vector<Symbol> symbols;
  if (alphabet_ == Alphabet::chars) {
    symbols.reserve(word.size());
    char_symbols(word, symbols);
  } else {
    if (word.size() == 1 || merge_table_.empty()) {  // nothing to merge (tandem's byte-level vocabulary has no merges)
      for (char byte : word) ids.push_back(byte_ids_[static_cast<uint8_t>(byte)]);
      return;
    }
    const auto n = static_cast<int32_t>(word.size());
    symbols.resize(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) symbols[i] = {byte_ids_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
  }
  merge(symbols);
  append_symbol_ids(symbols, ids);
}

}  // namespace tandem
