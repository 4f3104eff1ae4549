// Continuous batching: which sequences run in the next engine step.
//
// Every step, running sequences decode one token each, and waiting ones (new, or
// preempted) are admitted in arrival order while the step's token budget and free KV
// blocks allow, their prompts prefilled in chunks of at most the remaining budget. When a
// running sequence needs a block and none is free, the latest-arrived running sequence is
// preempted: its blocks are freed and it waits to be recomputed (prompt + tokens so far),
// which gives the same tokens because sampling is counter-based. Nothing here touches
// model math: plan() only decides and allocates, the engine then runs the plan.
//
// Prefix sharing (SchedulerOptions::prefix_sharing): when a new sequence is admitted, the
// waiting new sequences with the same prompt (the other samples of its group) become its
// sharers. They wait, outside the queue but counted as running, until its prompt is
// prefilled; in that step each sharer gets a chunk of no tokens that lists the same KV
// blocks (reference-counted) and draws its first token from the same logits. The blocks a
// step writes into must be the writer's alone, so grow() first replaces a shared block by
// a planned copy (copy-on-write; only a prompt's last, partly filled block is ever written
// after sharing). Bit-identical to prefilling each sample: the forward is batch-invariant,
// and a sample's draws depend only on its seed and position. A preempted sample releases
// its references and is recomputed alone (unless it had drawn no token yet: then it is new
// again and may share again).
//
// Sessions (multi-turn rollouts, engine.h): a sequence whose turn ended is parked: it
// leaves the running set but keeps its KV blocks (pinned), so that its next turn, resumed
// with the tool's or environment's tokens appended, prefills only those. Pinned blocks
// are the first thing given up: when a step needs blocks, or the pins pass their cap, the
// longest-parked session is evicted (its blocks freed; resumed, it is recomputed like a
// preempted sequence, with the same tokens). Parked sequences do not count as running.
#pragma once

#include "rollout/kv_cache.h"

#include <cstdint>
#include <deque>
#include <unordered_map>
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
  // A sharer: the chunk of `logits_of`, listed earlier in the same step, prefills their
  // common prompt. This one runs no tokens (begin == end == prompt_length) and draws its
  // first token from that chunk's last logits.
  const Sequence* logits_of = nullptr;
};

struct ScheduledStep {
  std::vector<ScheduledChunk> chunks;
  // Copy-on-write block copies, to run in this order before the step's forward (a block
  // freed after being copied from may be a later copy's destination).
  std::vector<KvBlockCopy> copies;
};

struct SchedulerOptions {
  int64_t block_size = 16;
  int64_t max_batch_tokens = 2048;  // tokens per step, prefill chunks and decodes together
  int64_t max_running = 256;        // sequences holding KV blocks at once (sharers waiting on a prefill included)
  bool prefix_sharing = true;       // samples with the same prompt prefill it once
  int64_t max_pinned_blocks = -1;   // parked sessions hold at most this many blocks; -1: no cap but the cache
};

class Scheduler {
 public:
  Scheduler(BlockAllocator& blocks, const SchedulerOptions& options);

  void add(Sequence* sequence);  // joins the waiting queue
  // The next step's work; blocks for it are allocated. No chunks when nothing is left.
  ScheduledStep plan();
  // The sequence is done: its blocks are freed and it leaves the running set.
  void finish(Sequence* sequence);

  // A session's turn ended: it leaves the running set and keeps its blocks (evicted
  // oldest-first when the pin cap is passed).
  void park(Sequence* sequence);
  // Its next turn: tokens were appended; it waits (by its old arrival) with the blocks it
  // still has, which stay evictable until it is admitted.
  void resume(Sequence* sequence);
  // A parked session is closed: its blocks are freed.
  void close(Sequence* sequence);

  // Every running sequence gives up its KV blocks and waits to be recomputed (prompt and
  // tokens so far), and every parked one gives up its pins: the cache holds keys and values
  // of weights just replaced. Not counted as preemptions or evictions.
  void recompute_all();

  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t preemptions() const { return preemptions_; }
  int64_t evictions() const { return evictions_; }  // parked sessions whose blocks were taken back
  int64_t pinned_blocks() const { return pinned_blocks_; }  // held by parked sessions (a shared block once per holder)
  int64_t parked() const { return static_cast<int64_t>(parked_.size()); }
  int64_t blocks_needed(int64_t tokens) const { return (tokens + options_.block_size - 1) / options_.block_size; }

 private:
  // Blocks for `tokens` positions, the ones written from `cached` on unshared first;
  // false if out of blocks.
  bool grow(Sequence* sequence, int64_t tokens);
  void preempt(Sequence* sequence);
  // Blocks grow() would take from the free list to hold `tokens` positions.
  int64_t blocks_to_grow(const Sequence* sequence, int64_t tokens) const;
  // Evicts parked sessions, longest-parked first, until `blocks` are free; false if even
  // all of them are not enough.
  bool free_by_evicting(int64_t blocks, const Sequence* keep = nullptr);
  void evict_oldest(const Sequence* keep = nullptr);  // any parked session but `keep`
  void unpark(Sequence* sequence);  // admitted or closed: its blocks are its own again
  void release_blocks(Sequence* sequence);
  // Waiting new sequences with the new `leader`'s prompt become its sharers, while the
  // running cap allows.
  void attach_sharers(Sequence* leader);
  // The leader's prompt is prefilled this step: its sharers get its blocks, a chunk each,
  // and join `running`.
  void fork_sharers(Sequence* leader, std::vector<ScheduledChunk>& chunks, std::vector<Sequence*>& running);
  int64_t holding() const { return static_cast<int64_t>(running_.size()) + sharers_waiting_; }

  BlockAllocator& blocks_;
  SchedulerOptions options_;
  std::deque<Sequence*> waiting_;  // by arrival
  std::vector<Sequence*> running_;  // by arrival
  std::unordered_map<const Sequence*, std::vector<Sequence*>> sharers_;  // leader -> sharers waiting for its prefill
  int64_t sharers_waiting_ = 0;     // all of sharers_' lists
  std::vector<KvBlockCopy> copies_;  // of the plan being made
  int64_t preemptions_ = 0;
  // By time parked, until admitted again or closed; evicted ones leave it (block_table empty).
  std::deque<Sequence*> parked_;
  int64_t pinned_blocks_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace tandem
