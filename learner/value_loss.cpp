#include "learner/value_loss.h"

#include "learner/masked_ops.h"

#include <ATen/ATen.h>

namespace tandem {

at::Tensor clipped_value_loss(const at::Tensor& values, const at::Tensor& old_values, const at::Tensor& returns,
                              const at::Tensor& mask, double clip_range) {
  at::Tensor valid = mask_to_bool(mask);
  check_token_tensor(values, mask, "values");
  check_token_tensor(old_values, mask, "old_values");
  check_token_tensor(returns, mask, "returns");
  at::Tensor v = zero_invalid(values, valid);
  at::Tensor target = zero_invalid(returns.to(v.scalar_type()), valid).detach();
  at::Tensor unclipped = (v - target).pow(2);
  if (clip_range <= 0) return 0.5 * unclipped;
  at::Tensor old = zero_invalid(old_values.to(v.scalar_type()), valid).detach();
  at::Tensor v_clipped = old + (v - old).clamp(-clip_range, clip_range);
  return 0.5 * at::maximum(unclipped, (v_clipped - target).pow(2));
}

double explained_variance(const at::Tensor& values, const at::Tensor& returns, const at::Tensor& mask) {
  at::Tensor valid = mask_to_bool(mask);
  check_token_tensor(values, mask, "values");
  check_token_tensor(returns, mask, "returns");
  at::Tensor r = zero_invalid(returns.detach().to(at::kDouble), valid);
  at::Tensor residual = zero_invalid(r - values.detach().to(at::kDouble), valid);
  auto variance = [&](const at::Tensor& x) {
    at::Tensor centred = zero_invalid(x - masked_mean(x, valid), valid);
    return masked_mean(centred.pow(2), valid);
  };
  at::Tensor both = at::stack({variance(r), variance(residual)}).to(at::kCPU);
  const double var_returns = both[0].item<double>();
  const double var_residual = both[1].item<double>();
  return var_returns > 0 ? 1.0 - var_residual / var_returns : 0.0;
}

}  // namespace tandem
