// Plain libtorch generation loops over the training module's parameters: the baseline
// bench/rollout_cpu measures the rollout engine against. Written the way a user of
// libtorch would write them, without our engine's scheduler or paged cache.
#pragma once

#include "actor/policy_torch.h"

#include <cstdint>
#include <vector>

namespace tandem::bench {

// Recomputes the whole sequence every token (no KV cache). Returns [batch][new_tokens].
std::vector<std::vector<int32_t>> torch_generate_no_cache(const PolicyModel& model,
                                                          const std::vector<std::vector<int32_t>>& prompts,
                                                          int64_t new_tokens, uint64_t seed);
// Keeps keys and values per layer as growing tensors (torch.cat each step).
std::vector<std::vector<int32_t>> torch_generate_kv_cache(const PolicyModel& model,
                                                          const std::vector<std::vector<int32_t>>& prompts,
                                                          int64_t new_tokens, uint64_t seed);

}  // namespace tandem::bench
