#include "learner/objective_registry.h"

#include "core/error.h"
#include "core/named_functions.h"

#include <utility>

namespace tandem {

namespace {

NamedFunctions<AdvantageEstimatorFn>& advantage_estimators() {
  static NamedFunctions<AdvantageEstimatorFn> table("advantage estimator (algorithm.advantage)",
                                                    {{"grpo", grpo_advantages},
                                                     {"dr_grpo", dr_grpo_advantages},
                                                     {"rloo", rloo_advantages},
                                                     {"reinforce_pp", reinforce_pp_advantages},
                                                     {"gae", gae_advantages},
                                                     {"grpo_vectorized", grpo_vectorized_advantages},
                                                     {"rloo_vectorized", rloo_advantages},
                                                     {"grpo_passk", grpo_passk_advantages},
                                                     {"opo", opo_advantages},
                                                     {"gpg", gpg_advantages},
                                                     {"reinforce_plus_plus_baseline", reinforce_pp_baseline_advantages},
                                                     {"remax", remax_advantages},
                                                     // verl's name for reinforce_pp
                                                     {"reinforce_plus_plus", reinforce_pp_advantages}});
  return table;
}

NamedFunctions<PolicyLossFn>& policy_losses() {
  static NamedFunctions<PolicyLossFn> table("policy loss (algorithm.policy_loss)",
                                            {{"ppo_clip", ppo_clip_loss},
                                             {"gspo", gspo_loss},
                                             {"sapo", sapo_loss},
                                             {"cispo", cispo_loss},
                                             {"geo_mean", geo_mean_loss},
                                             {"gpg", gpg_loss},
                                             {"clip_cov", clip_cov_loss},
                                             {"kl_cov", kl_cov_loss},
                                             {"vanilla", ppo_clip_loss}});  // verl's name for ppo_clip
  return table;
}

}  // namespace

void register_advantage_estimator(const std::string& name, AdvantageEstimatorFn fn) {
  advantage_estimators().add(name, std::move(fn));
}

void register_policy_loss(const std::string& name, PolicyLossFn fn) { policy_losses().add(name, std::move(fn)); }

AdvantageEstimatorFn find_advantage_estimator(const std::string& name) { return advantage_estimators().find(name); }

PolicyLossFn find_policy_loss(const std::string& name) { return policy_losses().find(name); }

std::vector<std::string> advantage_estimator_names() { return advantage_estimators().names(); }

std::vector<std::string> policy_loss_names() { return policy_losses().names(); }

}  // namespace tandem
