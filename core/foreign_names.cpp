#include "core/foreign_names.h"

#include <fmt/format.h>

#include <vector>

namespace tandem {

namespace {

struct ForeignName {
  const char* key;    // the tandem key the name is used for
  const char* value;  // the other framework's name
  const char* ours;   // what to write here
};

const std::vector<ForeignName>& foreign_names() {
  static const std::vector<ForeignName> table = {
      {"algorithm.advantage", "reinforce_plus_plus", "verl's reinforce_plus_plus is reinforce_pp here"},
      {"algorithm.advantage", "ppo", "PPO is advantage: gae with policy_loss: ppo_clip here"},
      {"algorithm.advantage", "grpo_passk",
       "pass@k advantages are not built in; grpo is the nearest (or register one with algorithm.plugin)"},
      {"algorithm.advantage", "remax", "ReMax is not built in; rloo and grpo are the built-in baselines"},
      {"algorithm.policy_loss", "vanilla", "verl's vanilla loss is ppo_clip here"},
      {"algorithm.policy_loss", "ppo", "the PPO loss is ppo_clip here"},
      {"algorithm.kl.estimator", "low_var_kl", "verl's low_var_kl is k3 here"},
      {"algorithm.kl.estimator", "kl", "verl's kl is k1 here"},
      {"algorithm.kl.estimator", "mse", "verl's mse is k2 here"},
      {"algorithm.loss_agg", "token-mean", "verl's token-mean is token_mean here"},
      {"algorithm.loss_agg", "seq-mean-token-sum", "verl's seq-mean-token-sum is seq_mean_token_sum here"},
      {"algorithm.loss_agg", "seq-mean-token-mean", "verl's seq-mean-token-mean is seq_mean_token_mean here"},
      {"algorithm.loss_agg", "seq-mean-token-sum-norm",
       "verl's seq-mean-token-sum-norm is seq_mean_token_sum_norm here"},
  };
  return table;
}

}  // namespace

std::string foreign_name_hint(const std::string& key_path, const std::string& value) {
  for (const ForeignName& f : foreign_names()) {
    if (key_path == f.key && value == f.value) return fmt::format(" ({})", f.ours);
  }
  return "";
}

}  // namespace tandem
