#include "learner/preference_loss.h"

#include "core/error.h"

#include <ATen/ATen.h>

#include <cmath>

namespace tandem {

PreferenceLoss preference_loss(const at::Tensor& chosen, const at::Tensor& rejected, double total_pairs) {
  TANDEM_CHECK(chosen.dim() == 1 && chosen.sizes() == rejected.sizes(),
               "preference loss: chosen and rejected scores must be [P] tensors of one size, got {} and {}",
               c10::str(chosen.sizes()), c10::str(rejected.sizes()));
  TANDEM_CHECK(total_pairs > 0, "preference loss: the mini-batch's pair count must be positive, got {}", total_pairs);
  const at::Tensor margin = chosen - rejected;
  PreferenceLoss out;
  out.loss = at::softplus(-margin).sum() / total_pairs;
  const at::Tensor m = margin.detach().to(at::kCPU, at::kDouble);
  out.accuracy_sum = m.gt(0).sum().item<double>();
  out.margin_sum = m.sum().item<double>();
  TANDEM_CHECK(std::isfinite(out.margin_sum), "preference loss: a score is not finite (margins sum to {})",
               out.margin_sum);
  return out;
}

}  // namespace tandem
