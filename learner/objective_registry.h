// Advantage estimators and policy losses by name, so that the config (and plugins) pick
// them: `algorithm.advantage` and `algorithm.policy_loss`.
//
// The built-ins (advantages.h: grpo, dr_grpo, rloo, reinforce_pp, gae; policy_loss.h:
// ppo_clip, gspo) are present from the first call: the tables are filled on first use
// rather than by static initialisers, which a static library would drop.
//
// Threading: registration and lookup lock a mutex; lookups return a copy of the function,
// so a later registration never invalidates one already found. Register before training
// starts (plugins at load time).
#pragma once

#include "learner/advantages.h"
#include "learner/policy_loss.h"

#include <functional>
#include <string>
#include <vector>

namespace tandem {

// Adds `fn` under `name`. An empty name, an empty function, or a name already taken
// (built-ins included: they cannot be replaced behind the config's back) is an Error.
void register_advantage_estimator(const std::string& name, AdvantageEstimatorFn fn);
void register_policy_loss(const std::string& name, PolicyLossFn fn);

// The function registered under `name`; an unknown name is an Error listing the
// registered names, with a did-you-mean.
AdvantageEstimatorFn find_advantage_estimator(const std::string& name);
PolicyLossFn find_policy_loss(const std::string& name);

// Registered names, built-ins first, then in registration order.
std::vector<std::string> advantage_estimator_names();
std::vector<std::string> policy_loss_names();

}  // namespace tandem
