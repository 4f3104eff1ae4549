#include "rollout/scheduler.h"

#include "core/error.h"

#include <algorithm>

namespace tandem {

namespace {

bool by_arrival(const Sequence* a, const Sequence* b) { return a->arrival < b->arrival; }

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
  while (static_cast<int64_t>(sequence->block_table.size()) < blocks_needed(tokens)) {
    int32_t block = blocks_.allocate();
    if (block < 0) return false;
    sequence->block_table.push_back(block);
  }
  return true;
}

void Scheduler::release_blocks(Sequence* sequence) {
  for (int32_t block : sequence->block_table) blocks_.release(block);
  sequence->block_table.clear();
}

void Scheduler::preempt(Sequence* sequence) {
  release_blocks(sequence);
  sequence->cached = 0;
  running_.erase(std::find(running_.begin(), running_.end(), sequence));
  add(sequence);
  ++preemptions_;
}

void Scheduler::finish(Sequence* sequence) {
  release_blocks(sequence);
  auto it = std::find(running_.begin(), running_.end(), sequence);
  TANDEM_CHECK(it != running_.end(), "finishing a sequence that is not running");
  running_.erase(it);
}

std::vector<ScheduledChunk> Scheduler::plan() {
  std::vector<ScheduledChunk> chunks;
  int64_t budget = options_.max_batch_tokens;
  const int64_t preemptions_before = preemptions_;

  // 1. Running sequences continue: a decode token, or the next chunk of an unfinished
  //    prefill. Out of blocks: preempt from the latest arrival until this one fits.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int64_t end = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()), s->cached + budget);
    bool fits = grow(s, end);
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
    ++i;
  }

  // 2. Admit waiting sequences in arrival order while budget, blocks and the running cap
  //    allow. The first that does not fit stops admission (no overtaking: fairness).
  //    After a preemption nothing is admitted this step: memory is what ran out.
  while (preemptions_ == preemptions_before && !waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < options_.max_running) {
    Sequence* s = waiting_.front();
    const int64_t end = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()), s->cached + budget);
    if (blocks_.free_count() < blocks_needed(end)) break;
    TANDEM_CHECK(grow(s, end), "block accounting is inconsistent");
    waiting_.pop_front();
    running_.push_back(s);
    chunks.push_back({s, s->cached, end});
    budget -= end - s->cached;
  }
  std::sort(running_.begin(), running_.end(), by_arrival);
  return chunks;
}

}  // namespace tandem
