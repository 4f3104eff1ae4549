#include "plugins/reward_registry.h"

#include "core/named_functions.h"
#include "plugins/rewards.h"

namespace tandem {

namespace {

NamedFunctions<RewardFn>& rewards() {
  static NamedFunctions<RewardFn> table("reward function (reward[].name)", {{"math_answer", math_answer_reward}});
  return table;
}

}  // namespace

void register_reward(const std::string& name, RewardFn fn) { rewards().add(name, std::move(fn)); }

RewardFn find_reward(const std::string& name) { return rewards().find(name); }

std::vector<std::string> reward_names() { return rewards().names(); }

}  // namespace tandem
