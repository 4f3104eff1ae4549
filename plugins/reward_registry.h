// Reward functions by name (`reward: [{name: ...}]`): the built-ins (plugins/rewards.h)
// and those plugins register (tandem/plugin.h).
#pragma once

#include <tandem/reward.h>

#include <string>
#include <vector>

namespace tandem {

// An empty name or function, or a name already taken, is an Error.
void register_reward(const std::string& name, RewardFn fn);
// An unknown name is an Error listing the registered ones, with a did-you-mean.
RewardFn find_reward(const std::string& name);
std::vector<std::string> reward_names();

}  // namespace tandem
