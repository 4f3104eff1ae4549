// Pieces the advantage estimators share (advantage_parts.h).
#include "learner/advantage_parts.h"

#include "core/error.h"
#include "learner/masked_ops.h"

#include <ATen/ATen.h>

namespace tandem::advantage_parts {

Batch check_inputs(const AdvantageInputs& in, const char* estimator, bool needs_group, bool needs_values) {
  Batch batch;
  TANDEM_CHECK(in.mask.defined(), "{}: the mask is missing", estimator);
  batch.valid = mask_to_bool(in.mask);
  batch.size = in.mask.size(0);
  TANDEM_CHECK(in.rewards.defined() && in.rewards.dim() == 1 && in.rewards.size(0) == batch.size,
               "{}: rewards must be a [B] tensor with B = {} (the mask's rows)", estimator, batch.size);
  TANDEM_CHECK(in.group_size >= 1, "{}: group_size must be >= 1, got {}", estimator, in.group_size);
  TANDEM_CHECK(batch.size % in.group_size == 0,
               "{}: a batch of {} samples is not a whole number of groups of group_size {} "
               "(samples of one prompt must be consecutive)",
               estimator, batch.size, in.group_size);
  TANDEM_CHECK(!needs_group || in.group_size >= 2,
               "{}: the baseline compares the samples of one prompt and needs group_size >= 2, got {}", estimator,
               in.group_size);
  if (in.token_rewards.defined()) check_token_tensor(in.token_rewards, in.mask, "token_rewards");
  if (needs_values) check_token_tensor(in.values, in.mask, "values (the critic's, for gae)");
  return batch;
}

// [B] float64: the sequence reward plus the sum of the token rewards over valid tokens.
at::Tensor sequence_rewards(const AdvantageInputs& in, const Batch& batch) {
  at::Tensor r = in.rewards.to(at::kDouble);
  if (in.token_rewards.defined()) r = r + zero_invalid(in.token_rewards.to(at::kDouble), batch.valid).sum(1);
  return r;
}

// Advantages come back in the rewards' floating dtype (float32 for integer rewards).
at::ScalarType result_dtype(const AdvantageInputs& in) {
  return at::isFloatingType(in.rewards.scalar_type()) ? in.rewards.scalar_type() : at::kFloat;
}

// Sequence advantages [B] float64 → [B, T] over each sample's valid tokens.
at::Tensor broadcast_over_tokens(const at::Tensor& sequence_advantages, const Batch& batch, at::ScalarType dtype) {
  return zero_invalid(sequence_advantages.unsqueeze(1).expand(batch.valid.sizes()), batch.valid).to(dtype);
}

// r [B] float64 → [B / n, n]; `identical` [B / n, 1] is true where a group's rewards are all equal.
Groups make_groups(const at::Tensor& r, int64_t n) {
  Groups g;
  g.rewards = r.view({-1, n});
  g.identical = at::amax(g.rewards, {1}, true).eq(at::amin(g.rewards, {1}, true));
  return g;
}

at::Tensor group_variance(const at::Tensor& rewards) {
  const at::Tensor centred = rewards - rewards.mean(1, true);
  return centred.pow(2).sum(1, true) / static_cast<double>(rewards.size(1) - 1);
}

// Group-relative advantage [G, n] → [B], exactly 0 for groups of equal rewards (their
// float64 mean can be an ulp off, and ulp / eps is not 0).
at::Tensor finish_groups(const at::Tensor& advantages, const Groups& g) {
  return at::where(g.identical, at::zeros_like(advantages), advantages).reshape({-1});
}

// [B, T] float64 on the CPU: token rewards with the sequence reward added at each row's
// last valid token.
at::Tensor token_level_rewards(const AdvantageInputs& in, const Batch& batch) {
  const int64_t T = batch.valid.size(1);
  at::Tensor positions = at::arange(T, batch.valid.options().dtype(at::kLong)).unsqueeze(0).expand(batch.valid.sizes());
  at::Tensor last = at::where(batch.valid, positions, at::full({}, -1, positions.options())).amax(1);  // [B], -1: empty
  at::Tensor is_last = positions.eq(last.unsqueeze(1)) & batch.valid;
  at::Tensor r = at::where(is_last, in.rewards.to(at::kDouble).unsqueeze(1).expand(batch.valid.sizes()),
                           at::zeros({}, in.rewards.options().dtype(at::kDouble)));
  if (in.token_rewards.defined()) r = r + zero_invalid(in.token_rewards.to(at::kDouble), batch.valid);
  return r.to(at::kCPU).contiguous();
}

}  // namespace tandem::advantage_parts
