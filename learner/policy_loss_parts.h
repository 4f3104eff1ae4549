// Pieces the policy losses share (policy_loss.cpp, policy_loss_variants.cpp). Internal to
// learner/.
#pragma once

#include <tandem/objectives.h>

#include <ATen/core/Tensor.h>

namespace tandem::policy_loss_parts {

// Log-ratio bounds before exp() (policy_loss.h).
constexpr double kMaxLogRatio = 20.0;
constexpr double kGspoMaxLogRatio = 10.0;

// Checks the tensors' shapes and the clip parameters; returns the mask as [B, T] bool.
at::Tensor check_inputs(const PolicyLossInputs& in, const PolicyLossParams& params, const char* loss_name);

// ratio [B, T] (differentiable), advantages [B, T] → the clipped per-token loss, with dual
// clip when params.dual_c > 0 (policy_loss.h).
PolicyLossResult clipped_surrogate(const at::Tensor& ratio, const at::Tensor& advantages, const at::Tensor& valid,
                                   const PolicyLossParams& params);

// log rho = logprobs - old_logprobs, 0 at masked positions, clamped to [-20, 20]
// (differentiable inside the bounds, constant outside).
at::Tensor bounded_log_ratio(const PolicyLossInputs& in, const at::Tensor& valid);

}  // namespace tandem::policy_loss_parts
