// Pieces the advantage estimators share (advantages.cpp, outcome_advantages.cpp): input
// checks, the sequence reward, groups of consecutive samples, and broadcasting a sequence
// advantage over its valid tokens. Internal to learner/.
#pragma once

#include <tandem/objectives.h>

#include <ATen/core/Tensor.h>

namespace tandem::advantage_parts {

struct Batch {
  at::Tensor valid;  // [B, T] bool
  int64_t size = 0;  // B
};

// Checks the layout (rewards [B], whole groups, group_size >= 2 where `needs_group`, the
// optional per-token tensors' shapes); an Error names `estimator`.
Batch check_inputs(const AdvantageInputs& in, const char* estimator, bool needs_group, bool needs_values);

// [B] float64: the sequence reward plus the sum of the token rewards over valid tokens.
at::Tensor sequence_rewards(const AdvantageInputs& in, const Batch& batch);

// Advantages come back in the rewards' floating dtype (float32 for integer rewards).
at::ScalarType result_dtype(const AdvantageInputs& in);

// Sequence advantages [B] float64 → [B, T] over each sample's valid tokens.
at::Tensor broadcast_over_tokens(const at::Tensor& sequence_advantages, const Batch& batch, at::ScalarType dtype);

struct Groups {
  at::Tensor rewards;    // [G, n]
  at::Tensor identical;  // [G, 1] bool: the group's rewards are all equal
};

// r [B] float64 → [B / n, n] groups.
Groups make_groups(const at::Tensor& r, int64_t n);

// [G, 1]: each group's variance with Bessel's correction (n - 1), as torch.var.
at::Tensor group_variance(const at::Tensor& rewards);

// Group-relative advantage [G, n] → [B], exactly 0 for groups of equal rewards (their
// float64 mean can be an ulp off, and ulp / eps is not 0).
at::Tensor finish_groups(const at::Tensor& advantages, const Groups& g);

// [B, T] float64 on the CPU: token rewards with the sequence reward added at each row's
// last valid token.
at::Tensor token_level_rewards(const AdvantageInputs& in, const Batch& batch);

}  // namespace tandem::advantage_parts
