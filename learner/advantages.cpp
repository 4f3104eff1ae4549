#include "learner/advantages.h"

#include "core/error.h"
#include "learner/masked_ops.h"

#include <ATen/ATen.h>

namespace tandem {

namespace {

struct Batch {
  at::Tensor valid;  // [B, T] bool
  int64_t size = 0;  // B
};

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
struct Groups {
  at::Tensor rewards;    // [G, n]
  at::Tensor identical;  // [G, 1] bool
};

Groups make_groups(const at::Tensor& r, int64_t n) {
  Groups g;
  g.rewards = r.view({-1, n});
  g.identical = at::amax(g.rewards, {1}, true).eq(at::amin(g.rewards, {1}, true));
  return g;
}

// Group-relative advantage [G, n] → [B], exactly 0 for groups of equal rewards (their
// float64 mean can be an ulp off, and ulp / eps is not 0).
at::Tensor finish_groups(const at::Tensor& advantages, const Groups& g) {
  return at::where(g.identical, at::zeros_like(advantages), advantages).reshape({-1});
}

AdvantageResult group_mean_advantages(const AdvantageInputs& in, bool divide_by_std, double eps,
                                      const char* estimator) {
  Batch batch = check_inputs(in, estimator, /*needs_group=*/true, /*needs_values=*/false);
  Groups g = make_groups(sequence_rewards(in, batch), in.group_size);
  at::Tensor centred = g.rewards - g.rewards.mean(1, true);  // [G, n]
  if (divide_by_std) {
    at::Tensor std = (centred.pow(2).sum(1, true) / static_cast<double>(in.group_size - 1)).sqrt();  // [G, 1]
    centred = centred / (std + eps);
  }
  return {broadcast_over_tokens(finish_groups(centred, g), batch, result_dtype(in)), at::Tensor()};
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

// The backward recurrences are sequential in T, so they run as a plain loop over a CPU
// float64 copy (B*T doubles are cheap to move; T small kernels per step on a GPU are not).
// Masked positions are skipped: `next` always refers to the next valid token.
void discounted_returns(const at::Tensor& rewards, const at::Tensor& valid, double gamma, at::Tensor& returns) {
  auto r = rewards.accessor<double, 2>();
  auto v = valid.accessor<bool, 2>();
  auto out = returns.accessor<double, 2>();
  for (int64_t b = 0; b < r.size(0); ++b) {
    double next_return = 0;
    for (int64_t t = r.size(1) - 1; t >= 0; --t) {
      if (!v[b][t]) continue;
      next_return = r[b][t] + gamma * next_return;
      out[b][t] = next_return;
    }
  }
}

void gae_recurrence(const at::Tensor& rewards, const at::Tensor& values, const at::Tensor& valid, double gamma,
                    double lam, at::Tensor& advantages) {
  auto r = rewards.accessor<double, 2>();
  auto value = values.accessor<double, 2>();
  auto v = valid.accessor<bool, 2>();
  auto out = advantages.accessor<double, 2>();
  for (int64_t b = 0; b < r.size(0); ++b) {
    double next_value = 0;  // terminal after the last valid token
    double next_advantage = 0;
    for (int64_t t = r.size(1) - 1; t >= 0; --t) {
      if (!v[b][t]) continue;
      const double delta = r[b][t] + gamma * next_value - value[b][t];
      next_advantage = delta + gamma * lam * next_advantage;
      next_value = value[b][t];
      out[b][t] = next_advantage;
    }
  }
}

}  // namespace

AdvantageParams advantage_params(const AlgorithmConfig& config) {
  AdvantageParams params;
  params.normalize_std = config.normalize_std;
  params.gamma = config.gamma;
  params.lam = config.lam;
  return params;
}

AdvantageResult grpo_advantages(const AdvantageInputs& in, const AdvantageParams& params) {
  return group_mean_advantages(in, params.normalize_std, params.eps, "grpo");
}

AdvantageResult dr_grpo_advantages(const AdvantageInputs& in, const AdvantageParams& params) {
  return group_mean_advantages(in, /*divide_by_std=*/false, params.eps, "dr_grpo");
}

AdvantageResult rloo_advantages(const AdvantageInputs& in, const AdvantageParams& params) {
  Batch batch = check_inputs(in, "rloo", /*needs_group=*/true, /*needs_values=*/false);
  Groups g = make_groups(sequence_rewards(in, batch), in.group_size);
  const double others = static_cast<double>(in.group_size - 1);
  at::Tensor baseline = (g.rewards.sum(1, true) - g.rewards) / others;  // [G, n]: mean of the others
  return {broadcast_over_tokens(finish_groups(g.rewards - baseline, g), batch, result_dtype(in)),
          at::Tensor()};
}

AdvantageResult reinforce_pp_advantages(const AdvantageInputs& in, const AdvantageParams& params) {
  Batch batch = check_inputs(in, "reinforce_pp", /*needs_group=*/false, /*needs_values=*/false);
  at::Tensor valid_cpu = batch.valid.to(at::kCPU).contiguous();
  at::Tensor returns = at::zeros(valid_cpu.sizes(), valid_cpu.options().dtype(at::kDouble));
  discounted_returns(token_level_rewards(in, batch), valid_cpu, params.gamma, returns);
  at::Tensor advantages = masked_whiten(returns, valid_cpu, params.eps);
  return {advantages.to(in.rewards.device(), result_dtype(in)), at::Tensor()};
}

AdvantageResult gae_advantages(const AdvantageInputs& in, const AdvantageParams& params) {
  Batch batch = check_inputs(in, "gae", /*needs_group=*/false, /*needs_values=*/true);
  at::Tensor valid_cpu = batch.valid.to(at::kCPU).contiguous();
  at::Tensor values = zero_invalid(in.values.to(at::kCPU, at::kDouble), valid_cpu).contiguous();
  at::Tensor advantages = at::zeros(valid_cpu.sizes(), values.options());
  gae_recurrence(token_level_rewards(in, batch), values, valid_cpu, params.gamma, params.lam, advantages);
  at::Tensor returns = zero_invalid(advantages + values, valid_cpu);
  if (params.whiten_advantages) advantages = masked_whiten(advantages, valid_cpu, params.eps);
  const auto device = in.rewards.device();
  const auto dtype = result_dtype(in);
  return {advantages.to(device, dtype), returns.to(device, dtype)};
}

}  // namespace tandem
