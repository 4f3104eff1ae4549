#include "learner/advantages.h"

#include "core/error.h"
#include "learner/advantage_parts.h"
#include "learner/masked_ops.h"

#include <ATen/ATen.h>

namespace tandem {

namespace {

using namespace advantage_parts;

AdvantageResult group_mean_advantages(const AdvantageInputs& in, bool divide_by_std, double eps,
                                      const char* estimator) {
  Batch batch = check_inputs(in, estimator, /*needs_group=*/true, /*needs_values=*/false);
  Groups g = make_groups(sequence_rewards(in, batch), in.group_size);
  at::Tensor centred = g.rewards - g.rewards.mean(1, true);  // [G, n]
  if (divide_by_std) {
    centred = centred / (group_variance(g.rewards).sqrt() + eps);
  }
  return {broadcast_over_tokens(finish_groups(centred, g), batch, result_dtype(in)), at::Tensor()};
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
