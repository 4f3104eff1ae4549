#include "rewards/registry.h"

#include "core/error.h"
#include "core/named_functions.h"
#include "rewards/builtin.h"

#include <fmt/format.h>

namespace tandem {

namespace {

// Every reward is stored as a maker from its config entry; a registered function ignores it.
using RewardMaker = std::function<RewardFn(const RewardConfig&)>;

NamedFunctions<RewardMaker>& rewards() {
  static NamedFunctions<RewardMaker> table(
      "reward function (reward.N.name)",
      {
          {"math_answer", [](const RewardConfig&) -> RewardFn { return math_answer_reward; }},
          {"format", [](const RewardConfig& c) { return make_format_reward(c.pattern); }},
          {"length_penalty", [](const RewardConfig& c) { return make_length_penalty_reward(c.max_length); }},
      });
  return table;
}

// The built-ins that read a setting, and which one.
const char* setting_of(const std::string& name) {
  if (name == "format") return "pattern";
  if (name == "length_penalty") return "max_length";
  return nullptr;
}

}  // namespace

void register_reward(const std::string& name, RewardFn fn) {
  TANDEM_CHECK(static_cast<bool>(fn), "registering reward function (reward.N.name) {}: the function is empty", name);
  rewards().add(name, [fn = std::move(fn)](const RewardConfig&) { return fn; });
}

RewardFn make_reward(const RewardConfig& config) { return rewards().find(config.name)(config); }

void check_reward_config(const RewardConfig& config, size_t index) {
  const char* setting = setting_of(config.name);
  if (!config.pattern.empty() && config.name != "format") {
    throw Error(fmt::format("reward.{}.pattern: only the format reward reads pattern (this entry is {})", index,
                            config.name));
  }
  if (config.max_length != 0 && config.name != "length_penalty") {
    throw Error(fmt::format("reward.{}.max_length: only the length_penalty reward reads max_length (this entry is {})",
                            index, config.name));
  }
  if (!setting) return;
  try {
    rewards().find(config.name)(config);  // compiles the pattern, checks the length
  } catch (const Error& e) {
    throw Error(fmt::format("reward.{}.{}: {}", index, setting, e.what()));
  }
}

RewardFn find_reward(const std::string& name) {
  RewardMaker maker = rewards().find(name);
  if (const char* setting = setting_of(name)) {
    return [name, setting](const RewardInput&) -> RewardResult {
      throw Error(fmt::format("reward {} is made from its config entry ({}): build it with make_reward(config)", name,
                              setting));
    };
  }
  RewardConfig config;
  config.name = name;
  return maker(config);
}

std::vector<std::string> reward_names() { return rewards().names(); }

}  // namespace tandem
