// Names users bring from verl, OpenRLHF and TRL configs, and what tandem calls the same
// thing. Config errors add the translation to an unknown name instead of only a
// did-you-mean by spelling (verl's `reinforce_plus_plus` is far from `reinforce_pp`).
#pragma once

#include <string>

namespace tandem {

// " (verl's reinforce_plus_plus is reinforce_pp here)" for a known foreign name used at
// `key_path`, else "".
std::string foreign_name_hint(const std::string& key_path, const std::string& value);

// "verl's train_batch_size is data.batch_size here (prompts per step)" when the last part
// of an unknown `key_path` is a verl config key (Hydra's data.*, actor_rollout_ref.*,
// algorithm.*, trainer.*, custom_reward_function), else "". docs/from_verl.md has them all.
std::string foreign_key_hint(const std::string& key_path);

}  // namespace tandem
