// Reward functions by name (`reward: [{name: ...}]`): the built-ins (rewards/builtin.h)
// and those plugins register (tandem/plugin.h).
//
// A config entry becomes a function through make_reward: built-ins read their settings
// from the entry (format: pattern; length_penalty: max_length), a plugin's reward is the
// function it registered. check_reward_config finds bad settings before anything starts.
#pragma once

#include "core/config.h"

#include <tandem/reward.h>

#include <string>
#include <vector>

namespace tandem {

// An empty name or function, or a name already taken (built-ins included), is an Error.
void register_reward(const std::string& name, RewardFn fn);

// The function a config entry names, made from its settings. An unknown name is an Error
// listing the known ones, with a did-you-mean; bad settings are an Error saying which.
RewardFn make_reward(const RewardConfig& config);

// Checks the settings of entry `index` of the config's reward list, without looking the
// name up (a plugin's reward exists only once the plugin is loaded): an Error such as
//   reward.1.pattern: invalid regex "(ab": missing closing parenthesis (at offset 3)
//   reward.0.max_length: the length_penalty reward needs max_length >= 1 ..., got 0
//   reward.2.pattern: only the format reward reads pattern (this entry is math_answer)
void check_reward_config(const RewardConfig& config, size_t index);

// The function registered under `name` (plugins' rewards, math_answer). An unknown name
// is an Error as in make_reward. The built-ins made from settings (format, length_penalty)
// are found too, so that a name check passes, but their function throws when called:
// build those with make_reward.
RewardFn find_reward(const std::string& name);
std::vector<std::string> reward_names();

}  // namespace tandem
