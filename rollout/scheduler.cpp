#include "rollout/scheduler.h"

#include "core/error.h"

#include <algorithm>

namespace tandem {

namespace {

bool by_arrival(const Sequence* a, const Sequence* b) { return a->arrival < b->arrival; }

// Nothing of it is cached and it has drawn no token: it can share a prompt's prefill.
bool is_new(const Sequence* s) { return s->cached == 0 && static_cast<int64_t>(s->tokens.size()) == s->prompt_length; }

}  // namespace

Scheduler::Scheduler(BlockAllocator& blocks, const SchedulerOptions& options) : blocks_(blocks), options_(options) {
  TANDEM_CHECK(options.block_size > 0 && options.max_batch_tokens > 0 && options.max_running > 0,
               "scheduler options must be positive");
}

void Scheduler::add(Sequence* sequence) {
  TANDEM_CHECK(!sequence->tokens.empty(), "a sequence needs at least one token");
  auto at = std::upper_bound(waiting_.begin(), waiting_.end(), sequence, by_arrival);
  waiting_.insert(at, sequence);
}

bool Scheduler::grow(Sequence* sequence, int64_t tokens) {
  // Copy-on-write. Blocks before the one holding position `cached` are full and never
  // written again, so only those from it on are checked.
  std::vector<int32_t>& table = sequence->block_table;
  for (size_t i = static_cast<size_t>(sequence->cached / options_.block_size); i < table.size(); ++i) {
    if (blocks_.references(table[i]) == 1) continue;
    const int32_t copy = blocks_.allocate();
    if (copy < 0) return false;
    copies_.push_back({table[i], copy});
    blocks_.release(table[i]);  // still held by its other sharers
    table[i] = copy;
  }
  while (static_cast<int64_t>(sequence->block_table.size()) < blocks_needed(tokens)) {
    int32_t block = blocks_.allocate();
    if (block < 0) return false;
    sequence->block_table.push_back(block);
  }
  return true;
}

void Scheduler::release_blocks(Sequence* sequence) {
  for (int32_t block : sequence->block_table) {
    blocks_.release(block);
    if (blocks_.references(block) == 0) {
      // A copy planned into it this step (a sequence preempted right after its
      // copy-on-write) has no reader left.
      copies_.erase(std::remove_if(copies_.begin(), copies_.end(), [&](const KvBlockCopy& c) { return c.to == block; }),
                    copies_.end());
    }
  }
  sequence->block_table.clear();
}

void Scheduler::attach_sharers(Sequence* leader) {
  // A scan of the queue per new admission: a few thousand length compares at most (token
  // lists are compared only when lengths match), nothing next to the step's forward.
  std::vector<Sequence*> sharers;
  int64_t room = options_.max_running - holding();
  for (auto it = waiting_.begin(); it != waiting_.end() && room > 0;) {
    Sequence* s = *it;
    if (is_new(s) && s->tokens == leader->tokens) {
      sharers.push_back(s);
      it = waiting_.erase(it);
      --room;
    } else {
      ++it;
    }
  }
  if (sharers.empty()) return;
  sharers_waiting_ += static_cast<int64_t>(sharers.size());
  sharers_[leader] = std::move(sharers);
}

void Scheduler::fork_sharers(Sequence* leader, std::vector<ScheduledChunk>& chunks, std::vector<Sequence*>& running) {
  auto it = sharers_.find(leader);
  if (it == sharers_.end()) return;
  for (Sequence* s : it->second) {
    s->block_table = leader->block_table;
    for (int32_t block : s->block_table) blocks_.share(block);
    s->cached = leader->prompt_length;
    chunks.push_back({s, s->cached, s->cached, leader});
    running.push_back(s);
  }
  sharers_waiting_ -= static_cast<int64_t>(it->second.size());
  sharers_.erase(it);
}

void Scheduler::preempt(Sequence* sequence) {
  // Its sharers wait again, and share the prefill of whichever of them is admitted first.
  if (auto it = sharers_.find(sequence); it != sharers_.end()) {
    for (Sequence* s : it->second) add(s);
    sharers_waiting_ -= static_cast<int64_t>(it->second.size());
    sharers_.erase(it);
  }
  release_blocks(sequence);
  sequence->cached = 0;
  running_.erase(std::find(running_.begin(), running_.end(), sequence));
  add(sequence);
  ++preemptions_;
}

void Scheduler::recompute_all() {
  const int64_t preemptions = preemptions_, evictions = evictions_;
  while (!running_.empty()) preempt(running_.back());
  while (!parked_.empty()) evict_oldest();
  preemptions_ = preemptions;
  evictions_ = evictions;
}

void Scheduler::park(Sequence* sequence) {
  TANDEM_CHECK(sharers_.count(sequence) == 0, "a session parked before its prompt's sharers started");
  auto it = std::find(running_.begin(), running_.end(), sequence);
  TANDEM_CHECK(it != running_.end(), "parking a sequence that is not running");
  running_.erase(it);
  parked_.push_back(sequence);
  pinned_blocks_ += static_cast<int64_t>(sequence->block_table.size());
  while (options_.max_pinned_blocks >= 0 && pinned_blocks_ > options_.max_pinned_blocks) evict_oldest();
}

void Scheduler::resume(Sequence* sequence) {
  // It stays among the parked until admitted: waiting in the queue, its blocks are still
  // the first to go when others need them. (Evicted already, it holds none and is
  // recomputed when admitted.)
  add(sequence);
}

void Scheduler::unpark(Sequence* sequence) {
  if (auto it = std::find(parked_.begin(), parked_.end(), sequence); it != parked_.end()) {
    pinned_blocks_ -= static_cast<int64_t>(sequence->block_table.size());
    parked_.erase(it);
  }
}

void Scheduler::close(Sequence* sequence) {
  unpark(sequence);
  release_blocks(sequence);
  sequence->cached = 0;
}

void Scheduler::evict_oldest(const Sequence* keep) {
  auto it = parked_.begin();
  if (*it == keep) ++it;
  Sequence* s = *it;
  parked_.erase(it);
  pinned_blocks_ -= static_cast<int64_t>(s->block_table.size());
  release_blocks(s);
  s->cached = 0;
  ++evictions_;
}

int64_t Scheduler::blocks_to_grow(const Sequence* sequence, int64_t tokens) const {
  const std::vector<int32_t>& table = sequence->block_table;
  int64_t copies = 0;
  for (size_t i = static_cast<size_t>(sequence->cached / options_.block_size); i < table.size(); ++i) {
    copies += blocks_.references(table[i]) > 1 ? 1 : 0;
  }
  return copies + std::max<int64_t>(0, blocks_needed(tokens) - static_cast<int64_t>(table.size()));
}

bool Scheduler::free_by_evicting(int64_t blocks, const Sequence* keep) {
  // A block shared with a parked session frees only when its last holder lets go, so
  // this evicts until the count is reached or nothing else is parked.
  const size_t kept = std::find(parked_.begin(), parked_.end(), keep) != parked_.end() ? 1 : 0;
  while (blocks_.free_count() < blocks && parked_.size() > kept) evict_oldest(keep);
  return blocks_.free_count() >= blocks;
}

void Scheduler::finish(Sequence* sequence) {
  TANDEM_CHECK(sharers_.count(sequence) == 0, "a sequence finished before its prompt's sharers started");
  release_blocks(sequence);
  auto it = std::find(running_.begin(), running_.end(), sequence);
  TANDEM_CHECK(it != running_.end(), "finishing a sequence that is not running");
  running_.erase(it);
}

ScheduledStep Scheduler::plan() {
  std::vector<ScheduledChunk> chunks;
  copies_.clear();
  int64_t budget = options_.max_batch_tokens;
  const int64_t preemptions_before = preemptions_;
  std::vector<Sequence*> forked;

  // 1. Running sequences continue: a decode token, or the next chunk of an unfinished
  //    prefill. Out of blocks: preempt from the latest arrival until this one fits.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int64_t end = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()), s->cached + budget);
    bool fits = grow(s, end);
    // Out of blocks: pinned sessions give theirs up before running sequences are preempted.
    if (!fits) fits = free_by_evicting(blocks_to_grow(s, end)) && grow(s, end);
    while (!fits && running_.back() != s) {
      preempt(running_.back());
      fits = grow(s, end);
    }
    if (!fits) {  // s itself is the latest arrival: it waits for blocks to free up
      preempt(s);
      continue;
    }
    chunks.push_back({s, s->cached, end});
    budget -= end - s->cached;
    // Joining running_ after this loop: they run nothing more this step.
    if (end == static_cast<int64_t>(s->tokens.size())) fork_sharers(s, chunks, forked);
    ++i;
  }
  running_.insert(running_.end(), forked.begin(), forked.end());

  // 2. Admit waiting sequences in arrival order while budget, blocks and the running cap
  //    allow. The first that does not fit stops admission (no overtaking: fairness).
  //    After a preemption nothing is admitted this step: memory is what ran out.
  while (preemptions_ == preemptions_before && !waiting_.empty() && budget > 0 && holding() < options_.max_running) {
    Sequence* s = waiting_.front();
    const int64_t end = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()), s->cached + budget);
    // A resumed session still holds its blocks: only the new ones count.
    if (!free_by_evicting(blocks_to_grow(s, end), s)) break;
    unpark(s);
    TANDEM_CHECK(grow(s, end), "block accounting is inconsistent");
    waiting_.pop_front();
    running_.push_back(s);
    if (options_.prefix_sharing && is_new(s)) attach_sharers(s);
    chunks.push_back({s, s->cached, end});
    budget -= end - s->cached;
    if (end == static_cast<int64_t>(s->tokens.size())) fork_sharers(s, chunks, running_);
  }
  std::sort(running_.begin(), running_.end(), by_arrival);
  return {std::move(chunks), std::move(copies_)};
}

}  // namespace tandem
