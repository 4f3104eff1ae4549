#include "learner/objective_registry.h"

#include "core/error.h"
#include "learner/unknown_name.h"

#include <mutex>
#include <utility>

namespace tandem {

namespace {

// Names → functions, in registration order (a handful of entries: a vector is enough).
template <class Fn>
class NamedFunctions {
 public:
  NamedFunctions(std::string what, std::vector<std::pair<std::string, Fn>> built_ins)
      : what_(std::move(what)), entries_(std::move(built_ins)) {}

  void add(const std::string& name, Fn fn) {
    TANDEM_CHECK(!name.empty(), "registering a {} needs a name", what_);
    TANDEM_CHECK(static_cast<bool>(fn), "registering {} {}: the function is empty", what_, name);
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries_) {
      TANDEM_CHECK(entry.first != name, "a {} named {} is already registered", what_, name);
    }
    entries_.emplace_back(name, std::move(fn));
  }

  Fn find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries_) {
      if (entry.first == name) return entry.second;
    }
    throw_unknown_name(what_, name, names_locked());
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return names_locked();
  }

 private:
  std::vector<std::string> names_locked() const {
    std::vector<std::string> names;
    for (const auto& entry : entries_) names.push_back(entry.first);
    return names;
  }

  std::string what_;
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, Fn>> entries_;
};

NamedFunctions<AdvantageEstimatorFn>& advantage_estimators() {
  static NamedFunctions<AdvantageEstimatorFn> table("advantage estimator (algorithm.advantage)",
                                                    {{"grpo", grpo_advantages},
                                                     {"dr_grpo", dr_grpo_advantages},
                                                     {"rloo", rloo_advantages},
                                                     {"reinforce_pp", reinforce_pp_advantages},
                                                     {"gae", gae_advantages}});
  return table;
}

NamedFunctions<PolicyLossFn>& policy_losses() {
  static NamedFunctions<PolicyLossFn> table("policy loss (algorithm.policy_loss)",
                                            {{"ppo_clip", ppo_clip_loss}, {"gspo", gspo_loss}});
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
