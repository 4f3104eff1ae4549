#include "learner/kl.h"

#include "core/error.h"
#include "learner/masked_ops.h"
#include "core/unknown_name.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace tandem {

namespace {

// The k3 bounds (kl.h): the log-ratio before exp(), and the estimate.
constexpr double kK3MaxLogRatio = 20.0;
constexpr double kK3Max = 10.0;

const std::vector<std::pair<std::string, KlEstimator>>& estimators() {
  static const std::vector<std::pair<std::string, KlEstimator>> table = {
      {"k1", KlEstimator::k1}, {"k2", KlEstimator::k2}, {"k3", KlEstimator::k3}};
  return table;
}

}  // namespace

KlEstimator kl_estimator_from_name(const std::string& name) {
  for (const auto& [known, estimator] : estimators()) {
    if (known == name) return estimator;
  }
  // verl's names for the same estimators (low_var_kl carries the same bounds as our k3).
  if (name == "low_var_kl") return KlEstimator::k3;
  if (name == "kl") return KlEstimator::k1;
  if (name == "mse") return KlEstimator::k2;
  throw_unknown_name("KL estimator", name, kl_estimator_names());
}

std::string kl_estimator_name(KlEstimator estimator) {
  for (const auto& [name, known] : estimators()) {
    if (known == estimator) return name;
  }
  throw Error("kl_estimator_name: not a KlEstimator value");
}

std::vector<std::string> kl_estimator_names() {
  std::vector<std::string> names;
  for (const auto& entry : estimators()) names.push_back(entry.first);
  return names;
}

KlPlacement kl_placement_from_name(const std::string& name) {
  if (name == "loss") return KlPlacement::loss;
  if (name == "reward") return KlPlacement::reward;
  throw_unknown_name("KL placement (kl.in)", name, {"loss", "reward"});
}

at::Tensor kl_per_token(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, const at::Tensor& mask,
                        KlEstimator estimator) {
  at::Tensor valid = mask_to_bool(mask);
  check_token_tensor(logprobs, mask, "logprobs");
  check_token_tensor(ref_logprobs, mask, "ref_logprobs");
  // Select before exp(): padding may hold -inf log-probs.
  at::Tensor x = zero_invalid(logprobs - ref_logprobs.to(logprobs.scalar_type()), valid);  // [B, T]
  switch (estimator) {
    case KlEstimator::k1:
      return x;
    case KlEstimator::k2:
      return 0.5 * x.pow(2);
    case KlEstimator::k3: {
      // exp(-x) - 1 + x is 0 at x = 0, so masked positions stay 0. at::clamp passes no
      // gradient where it is active.
      at::Tensor c = x.clamp(-kK3MaxLogRatio, kK3MaxLogRatio);
      return (at::expm1(-c) + c).clamp_max(kK3Max);
    }
  }
  throw Error("kl_per_token: not a KlEstimator value");
}

at::Tensor kl_token_rewards(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, const at::Tensor& mask,
                            KlEstimator estimator, double coef) {
  return (-coef * kl_per_token(logprobs.detach(), ref_logprobs.detach(), mask, estimator));
}

KlController::KlController(double initial_coef, bool adaptive, double target, double horizon)
    : coef_(initial_coef), adaptive_(adaptive), target_(target), horizon_(horizon) {
  TANDEM_CHECK(initial_coef >= 0, "KL coefficient must be >= 0, got {}", initial_coef);
  TANDEM_CHECK(!adaptive || target > 0, "adaptive KL needs a target > 0, got {}", target);
  TANDEM_CHECK(!adaptive || horizon > 0, "adaptive KL needs a horizon > 0, got {}", horizon);
}

KlController::KlController(const KlConfig& config, double horizon)
    : KlController(config.coef, config.adaptive, config.target, horizon) {}

void KlController::set_coef(double coef) {
  TANDEM_CHECK(coef >= 0 && std::isfinite(coef), "KL coefficient must be finite and >= 0, got {}", coef);
  coef_ = coef;
}

void KlController::update(double measured_kl, int64_t n_steps) {
  if (!adaptive_) return;
  TANDEM_CHECK(std::isfinite(measured_kl), "adaptive KL: the measured KL is {}", measured_kl);
  TANDEM_CHECK(n_steps >= 0, "adaptive KL: n_steps must be >= 0, got {}", n_steps);
  const double error = std::clamp(measured_kl / target_ - 1.0, -0.2, 0.2);
  coef_ *= 1.0 + error * static_cast<double>(n_steps) / horizon_;
}

}  // namespace tandem
