#include "actor/bpe_model.h"

#include <queue>

namespace tandem {

bool BpeModel::add_token(std::string bytes, int32_t id) {
  return ids_by_bytes_.emplace(std::move(bytes), id).second;
}

int32_t BpeModel::id_of(std::string_view bytes) const {
  auto it = ids_by_bytes_.find(std::string(bytes));
  return it == ids_by_bytes_.end() ? -1 : it->second;
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  merges_[pair_key(left, right)] = BpeMerge{rank, merged};
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
  int missing = -1;
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = id_of(std::string(1, static_cast<char>(b)));
    if (byte_ids_[b] < 0 && missing < 0) missing = b;
  }
  return missing;
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;  // index of the previous live symbol, -1 at the start
  int32_t next;  // index of the next live symbol, -1 at the end
  bool live;     // false once merged into its left neighbour
};

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

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (ignore_merges_ && word.size() > 1) {
    int32_t whole = id_of(word);
    if (whole >= 0) {
      ids.push_back(whole);
      return;
    }
  }
  if (word.size() == 1 || merge_table_.empty()) {  // nothing to merge (tandem's byte-level vocabulary has no merges)
    for (char byte : word) ids.push_back(byte_ids_[static_cast<uint8_t>(byte)]);
    return;
  }
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) symbols[i] = {byte_ids_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true};

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
    if (left.id != top.left || symbols[left.next].id != top.right) continue;
    Symbol& right = symbols[left.next];
    left.id = top.new_id;
    right.live = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    if (left.next >= 0) push_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace tandem
