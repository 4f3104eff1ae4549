// Continuous batching: which sequences run in the next engine step.
//
// Every step, running sequences decode one token each, and waiting ones (new, or
// preempted) are admitted in arrival order while the step's token budget and free KV
// blocks allow, their prompts prefilled in chunks of at most the remaining budget. When a
// running sequence needs a block and none is free, the latest-arrived running sequence is
// preempted: its blocks are freed and it waits to be recomputed (prompt + tokens so far),
// which gives the same tokens because sampling is counter-based. Nothing here touches
// model math: plan() only decides and allocates, the engine then runs the plan.
#pragma once

#include "rollout/kv_cache.h"

#include <cstdint>
#include <deque>
#include <vector>

namespace tandem {

struct Sequence {
  int64_t arrival = 0;  // admission priority: lower first; preempted last-arrived first
  std::vector<int32_t> tokens;  // prompt then generated tokens
  int64_t prompt_length = 0;
  int64_t cached = 0;  // leading tokens whose keys/values are in the cache
  std::vector<int32_t> block_table;
};

struct ScheduledChunk {
  Sequence* sequence = nullptr;
  int64_t begin = 0;  // runs tokens[begin, end); samples a next token when end == tokens.size()
  int64_t end = 0;
};

struct SchedulerOptions {
  int64_t block_size = 16;
  int64_t max_batch_tokens = 2048;  // tokens per step, prefill chunks and decodes together
  int64_t max_running = 256;        // sequences holding KV blocks at once
};

class Scheduler {
 public:
  Scheduler(BlockAllocator& blocks, const SchedulerOptions& options);

  void add(Sequence* sequence);  // joins the waiting queue
  // The next step's work; blocks for it are allocated. Empty when nothing is left.
  std::vector<ScheduledChunk> plan();
  // The sequence is done: its blocks are freed and it leaves the running set.
  void finish(Sequence* sequence);

  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t preemptions() const { return preemptions_; }
  int64_t blocks_needed(int64_t tokens) const { return (tokens + options_.block_size - 1) / options_.block_size; }

 private:
  bool grow(Sequence* sequence, int64_t tokens);  // blocks for `tokens` positions; false if out of blocks
  void preempt(Sequence* sequence);
  void release_blocks(Sequence* sequence);

  BlockAllocator& blocks_;
  SchedulerOptions options_;
  std::deque<Sequence*> waiting_;  // by arrival
  std::vector<Sequence*> running_;  // by arrival
  int64_t preemptions_ = 0;
};

}  // namespace tandem
