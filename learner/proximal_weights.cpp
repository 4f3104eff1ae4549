#include "learner/proximal_weights.h"

#include "core/error.h"

#include <ATen/ATen.h>

namespace tandem {

ProximalWeights use_forward_as_proximal(ActorObjectiveInputs& in, const at::Tensor& stale, double is_cap) {
  TANDEM_CHECK(is_cap > 0, "is_cap must be positive, got {}", is_cap);
  TANDEM_CHECK(stale.sizes() == in.logprobs.sizes(), "stale is {}, the log-probs {}", c10::str(stale.sizes()),
               c10::str(in.logprobs.sizes()));
  const at::Tensor on = stale.gt(0).logical_and(in.mask.gt(0));
  const at::Tensor proximal = in.logprobs.detach();
  // In float64 and rounded once to float32, as the controller computes the weights it sends
  // (controller/loop/async_rl.cpp): a float32 exp is the CPU's vector code, within an ulp
  // or two but not the same on every CPU, so only this makes both paths agree everywhere.
  const at::Tensor ratio = at::exp(proximal.to(at::kDouble) - in.old_logprobs.to(at::kDouble))
                               .masked_fill(on.logical_not(), 1.0);
  TANDEM_CHECK(!ratio.isnan().any().item<bool>(), "a stale token's importance weight is NaN");
  const at::Tensor weights = ratio.clamp_max(is_cap).to(in.logprobs.scalar_type());
  ProximalWeights out;
  out.tokens = on.sum().item<double>();
  out.weight_sum = weights.masked_select(on).sum().item<double>();
  out.clipped = ratio.gt(is_cap).logical_and(on).sum().item<double>();
  const at::Tensor sent = in.is_weights.defined() ? in.is_weights : at::ones_like(weights);
  in.is_weights = at::where(on, weights, sent);
  in.old_logprobs = at::where(on, proximal, in.old_logprobs);
  return out;
}

}  // namespace tandem
