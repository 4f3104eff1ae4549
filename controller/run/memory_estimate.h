// What a run will hold in memory, estimated from the config and the model's shape before
// anything starts, so that sizes that cannot fit (a group_size of 2^31, a 10 TB KV cache,
// a config.json with a billion layers) are refused by `validate` and `run` with the
// numbers, instead of ending later in std::bad_alloc.
//
// The estimate counts what dominates, per process:
//   learner rank   float32 parameters, gradients and AdamW moments (divided over the
//                  ranks as learner.sharding divides them), the frozen KL reference when
//                  the KL is in the loss, and one micro-batch's activations;
//   rollout worker float32 weights and rollout.kv_cache_mb;
//   controller     one step's samples (tokens, log-probs, masks, advantages);
//   snapshots      learner.snapshot's two copies of each rank's state, in tmpfs.
// It is a lower bound of the real use, not an exact one: buffers, the allocator and
// libraries come on top.
#pragma once

#include "actor/model_config.h"
#include "core/config.h"

#include <string>
#include <vector>

namespace tandem {

struct MemoryPart {
  std::string what;
  double bytes = 0;
};

struct MemoryEstimate {
  double parameters = 0;  // the model's parameter count
  std::vector<MemoryPart> learner_rank, rollout_worker, controller;
  double snapshots = 0;   // learner.snapshot's tmpfs, all ranks on the host
  double learner_rank_bytes() const;
  double rollout_worker_bytes() const;
  double controller_bytes() const;
  // Everything on the controller's host when the local launcher starts every worker there.
  double host_bytes(const Config& c) const;
};

// `longest_prompt`: tokens of the longest prompt kept (the sequence is that plus
// rollout.max_new_tokens).
MemoryEstimate estimate_memory(const Config& c, const ModelConfig& model, int64_t longest_prompt);

// "1.5 GiB", "320 MiB", "2.1e+06 TiB": a byte count as people read it.
std::string format_bytes(double bytes);

// This machine's physical memory (MemTotal), bytes; 0 when unknown.
double machine_memory_bytes();

// What `validate` prints: the estimate per process and for this host.
std::string describe_memory(const Config& c, const MemoryEstimate& estimate, double machine_bytes);

// Why the run cannot fit ("" when it can): a host total over this machine's memory (local
// launcher), or a single process over any machine's (1 PiB, every launcher).
std::string memory_problem(const Config& c, const MemoryEstimate& estimate, double machine_bytes);

}  // namespace tandem
