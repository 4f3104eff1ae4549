// verl's policy losses beyond ppo_clip and gspo (policy_loss.h): sapo, cispo, geo_mean,
// gpg, clip_cov, kl_cov.
#include "learner/policy_loss.h"

#include "core/error.h"
#include "learner/masked_ops.h"
#include "learner/policy_loss_parts.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace tandem {

using namespace policy_loss_parts;

namespace {

// The advantages as a constant of the loss, 0 at masked positions.
at::Tensor constant_advantages(const PolicyLossInputs& in, const at::Tensor& valid) {
  return zero_invalid(in.advantages.to(in.logprobs.scalar_type()), valid).detach();
}

at::Tensor ratio_for_metrics(const at::Tensor& log_ratio, const at::Tensor& valid) {
  return at::where(valid, log_ratio.detach().exp(), at::ones({}, log_ratio.options()));
}

at::Tensor nothing_clipped(const at::Tensor& valid) { return at::zeros_like(valid); }

// Clip-Cov and KL-Cov single out tokens by the covariance of advantage and log-prob over
// the valid tokens: cov_t = (A_t - mean A)(logprobs_t - mean logprobs); -inf where masked.
at::Tensor token_covariance(const PolicyLossInputs& in, const at::Tensor& valid) {
  const at::Tensor a = zero_invalid(in.advantages.to(at::kDouble), valid);
  const at::Tensor logprobs = zero_invalid(in.logprobs.detach().to(at::kDouble), valid);
  const at::Tensor cov = (a - masked_mean(a, valid)) * (logprobs - masked_mean(logprobs, valid));
  return at::where(valid, cov, at::full({}, -INFINITY, cov.options()));
}

// max(1, floor(ratio * valid tokens)), 0 without a valid token.
int64_t singled_out_count(double ratio, const at::Tensor& valid) {
  const int64_t tokens = valid.sum().item<int64_t>();
  if (tokens == 0) return 0;
  return std::min<int64_t>(tokens, std::max<int64_t>(1, static_cast<int64_t>(std::floor(ratio * tokens))));
}

void check_cov_ratio(const PolicyLossParams& params, const char* loss_name) {
  TANDEM_CHECK(params.cov_ratio > 0 && params.cov_ratio <= 1, "{}: cov_ratio must be in (0, 1], got {}", loss_name,
               params.cov_ratio);
}

}  // namespace

PolicyLossResult sapo_loss(const PolicyLossInputs& in, const PolicyLossParams& params) {
  const at::Tensor valid = check_inputs(in, params, "sapo");
  TANDEM_CHECK(params.tau_pos > 0 && params.tau_neg > 0, "sapo: tau_pos and tau_neg must be > 0, got {} and {}",
               params.tau_pos, params.tau_neg);
  const at::Tensor log_ratio = bounded_log_ratio(in, valid);
  const at::Tensor ratio = log_ratio.exp();
  const at::Tensor a = constant_advantages(in, valid);
  const at::Tensor tau = at::where(a.gt(0), at::full({}, params.tau_pos, a.options()),
                                   at::full({}, params.tau_neg, a.options()));
  const at::Tensor gate = at::sigmoid(tau * (ratio - 1.0)) * (4.0 / tau);
  PolicyLossResult out{zero_invalid(-gate * a, valid), ratio_for_metrics(log_ratio, valid), nothing_clipped(valid)};
  out.sequence_mean = true;
  return out;
}

PolicyLossResult cispo_loss(const PolicyLossInputs& in, const PolicyLossParams& params) {
  const at::Tensor valid = check_inputs(in, params, "cispo");
  const at::Tensor log_ratio = bounded_log_ratio(in, valid);
  const at::Tensor ratio = log_ratio.detach().exp();
  const at::Tensor weight = ratio.clamp(1.0 - params.clip_low, 1.0 + params.clip_high);
  const at::Tensor logprobs = zero_invalid(in.logprobs, valid);
  const at::Tensor loss = zero_invalid(-weight * constant_advantages(in, valid) * logprobs, valid);
  return {loss, ratio_for_metrics(log_ratio, valid), weight.ne(ratio) & valid};
}

PolicyLossResult geo_mean_loss(const PolicyLossInputs& in, const PolicyLossParams& params) {
  const at::Tensor valid = check_inputs(in, params, "geo_mean");
  const at::Tensor x = bounded_log_ratio(in, valid);
  const at::Tensor a = constant_advantages(in, valid);
  const at::Tensor clamped = x.clamp(-params.clip_low, params.clip_high);
  // The side the advantage's sign makes dangerous is clipped: from above for A > 0, from
  // below for A < 0; a token with A = 0 contributes 0 (sgn 0).
  const at::Tensor l = at::where(a.gt(0), at::minimum(x, clamped),
                                 at::where(a.lt(0), at::maximum(x, clamped), at::zeros_like(x)));
  const at::Tensor lengths = valid.sum(1, /*keepdim=*/true).clamp_min(1).to(x.scalar_type());  // [B, 1]
  const at::Tensor sequence_log_ratio = zero_invalid(l, valid).sum(1, true) / lengths;
  const at::Tensor mean_advantage = a.sum(1, true) / lengths;
  const at::Tensor sequence_loss = -mean_advantage * sequence_log_ratio.exp();  // [B, 1]
  PolicyLossResult out{zero_invalid(sequence_loss.expand_as(x), valid),
                       at::where(valid, sequence_log_ratio.detach().exp().expand_as(x), at::ones({}, x.options())),
                       clamped.ne(x) & a.ne(0) & valid};  // verl counts A > 0 and A < 0 only
  out.sequence_mean = true;
  return out;
}

PolicyLossResult gpg_loss(const PolicyLossInputs& in, const PolicyLossParams& params) {
  const at::Tensor valid = check_inputs(in, params, "gpg");
  const at::Tensor loss = zero_invalid(-constant_advantages(in, valid) * zero_invalid(in.logprobs, valid), valid);
  return {loss, ratio_for_metrics(bounded_log_ratio(in, valid), valid), nothing_clipped(valid)};
}

PolicyLossResult clip_cov_loss(const PolicyLossInputs& in, const PolicyLossParams& params) {
  const at::Tensor valid = check_inputs(in, params, "clip_cov");
  check_cov_ratio(params, "clip_cov");
  TANDEM_CHECK(params.clip_cov_lb < params.clip_cov_ub, "clip_cov: the window needs lb < ub, got {} and {}",
               params.clip_cov_lb, params.clip_cov_ub);
  PolicyLossParams no_dual = params;
  no_dual.dual_c = 0;
  PolicyLossResult out = clipped_surrogate(bounded_log_ratio(in, valid).exp(), in.advantages, valid, no_dual);
  const at::Tensor cov = token_covariance(in, valid);
  const at::Tensor candidates =
      (valid & out.clipped.logical_not() & cov.gt(params.clip_cov_lb) & cov.lt(params.clip_cov_ub)).to(at::kCPU);
  // A uniform draw of the candidates, by the seed (a std::mt19937_64, the same on every
  // machine and libtorch version).
  const at::Tensor positions = candidates.reshape({-1}).nonzero().reshape({-1}).contiguous();
  std::vector<int64_t> chosen(positions.data_ptr<int64_t>(), positions.data_ptr<int64_t>() + positions.numel());
  std::mt19937_64 draw(params.seed);
  std::shuffle(chosen.begin(), chosen.end(), draw);
  chosen.resize(std::min<size_t>(chosen.size(), static_cast<size_t>(singled_out_count(params.cov_ratio, valid))));
  at::Tensor selected = at::zeros({valid.numel()}, valid.options().device(at::kCPU));
  if (!chosen.empty()) selected.index_fill_(0, at::tensor(chosen, at::kLong), true);
  selected = selected.view(valid.sizes()).to(valid.device());
  out.loss = out.loss.masked_fill(selected, 0.0);  // a constant 0: no gradient there
  out.clipped = out.clipped | selected;
  return out;
}

PolicyLossResult kl_cov_loss(const PolicyLossInputs& in, const PolicyLossParams& params) {
  const at::Tensor valid = check_inputs(in, params, "kl_cov");
  check_cov_ratio(params, "kl_cov");
  const at::Tensor log_ratio = bounded_log_ratio(in, valid);
  const at::Tensor a = constant_advantages(in, valid);
  at::Tensor loss = -a * log_ratio.exp();
  at::Tensor selected = at::zeros_like(valid);
  const int64_t count = singled_out_count(params.cov_ratio, valid);
  if (count > 0) {
    const at::Tensor top = std::get<1>(token_covariance(in, valid).reshape({-1}).topk(count));
    selected = selected.reshape({-1}).index_fill(0, top, true).view(valid.sizes());
    loss = loss + at::where(selected, params.kl_cov_coef * log_ratio.abs(), at::zeros_like(loss));
  }
  return {zero_invalid(loss, valid), ratio_for_metrics(log_ratio, valid), selected & valid};
}

}  // namespace tandem
