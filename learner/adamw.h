// AdamW (decoupled weight decay, bias-corrected moments) over a flat float32 range, so
// that ZeRO-2/FSDP ranks each keep the moments of their shard only. The moments live on
// the device of the parameters they step (fp32 state whatever learner.precision). Weight decay applies
// to every parameter (norm scales and biases included), as verl and OpenRLHF do.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tandem {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW {
 public:
  AdamW(int64_t numel, const AdamWOptions& options, at::Device device = at::kCPU);
  // One step on `params` (updated in place) with `grads`, both [numel].
  void step(at::Tensor& params, const at::Tensor& grads, double lr);

  int64_t steps() const { return steps_; }
  at::Tensor& exp_avg() { return exp_avg_; }        // first moments [numel]
  at::Tensor& exp_avg_sq() { return exp_avg_sq_; }  // second moments [numel]
  void set_steps(int64_t steps) { steps_ = steps; }

 private:
  AdamWOptions options_;
  at::Tensor exp_avg_;
  at::Tensor exp_avg_sq_;
  int64_t steps_ = 0;
};

// Learning rate at optimizer step `step` (0-based): linear warm-up from lr/warmup to lr
// over `warmup_steps`, then constant, or cosine decay to 0 at `total_steps`.
double scheduled_learning_rate(double peak_lr, const std::string& schedule, int64_t warmup_steps, int64_t step,
                               int64_t total_steps);

}  // namespace tandem
