#include "learner/adamw.h"

#include "core/error.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

namespace tandem {

AdamW::AdamW(int64_t numel, const AdamWOptions& options, at::Device device)
    : options_(options),
      exp_avg_(at::zeros({numel}, at::TensorOptions(at::kFloat).device(device))),
      exp_avg_sq_(at::zeros({numel}, at::TensorOptions(at::kFloat).device(device))) {}

void AdamW::step(at::Tensor& params, const at::Tensor& grads, double lr) {
  TANDEM_CHECK(params.numel() == exp_avg_.numel() && grads.numel() == exp_avg_.numel(),
               "AdamW holds {} moments; got {} parameters and {} gradients", exp_avg_.numel(), params.numel(),
               grads.numel());
  TANDEM_CHECK(params.device() == exp_avg_.device() && grads.device() == exp_avg_.device(),
               "AdamW's moments are on {}; got parameters on {} and gradients on {}", exp_avg_.device().str(),
               params.device().str(), grads.device().str());
  c10::NoGradGuard no_grad;
  ++steps_;
  const double correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_));
  const double correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(steps_));
  if (options_.weight_decay != 0) params.mul_(1.0 - lr * options_.weight_decay);
  exp_avg_.mul_(options_.beta1).add_(grads, 1.0 - options_.beta1);
  exp_avg_sq_.mul_(options_.beta2).addcmul_(grads, grads, 1.0 - options_.beta2);
  at::Tensor denominator = (exp_avg_sq_ / correction2).sqrt_().add_(options_.eps);
  params.addcdiv_(exp_avg_, denominator, -lr / correction1);
}

double scheduled_learning_rate(double peak_lr, const std::string& schedule, int64_t warmup_steps, int64_t step,
                               int64_t total_steps) {
  TANDEM_CHECK(step >= 0, "negative optimizer step {}", step);
  if (step < warmup_steps) return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (schedule == "constant") return peak_lr;
  TANDEM_CHECK(schedule == "cosine", "unknown learning-rate schedule \"{}\" (constant, cosine)", schedule);
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  return peak_lr * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace tandem
