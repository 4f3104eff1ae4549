#include "core/config_paths.h"

#include <filesystem>

namespace tandem {

namespace {

namespace fs = std::filesystem;

std::string* path_value(Config& c, const std::string& key) {
  if (key == "model.path") return &c.model.path;
  if (key == "data.train") return &c.data.train;
  if (key == "data.val") return &c.data.val;
  if (key == "reward_model.train") return &c.reward_model.train;
  if (key == "reward_model.val") return &c.reward_model.val;
  if (key == "algorithm.plugin") return &c.algorithm.plugin;
  if (key == "data.chat_template") return &c.data.chat_template;
  if (key == "environment.python") return &c.environment.python;
  if (key == "environment.plugin") return &c.environment.plugin;
  if (key.rfind("tools.", 0) == 0) {
    ToolConfig& tool = c.tools.at(std::stoul(key.substr(6)));
    return key.size() > 7 && key.compare(key.size() - 7, 7, ".plugin") == 0 ? &tool.plugin : &tool.python;
  }
  const std::string prefix = "reward.";
  if (key.rfind(prefix, 0) == 0) {
    RewardConfig& reward = c.reward.at(std::stoul(key.substr(prefix.size())));
    if (key.size() > 6 && key.compare(key.size() - 6, 6, ".model") == 0) return &reward.model;
    return key.size() > 7 && key.compare(key.size() - 7, 7, ".python") == 0 ? &reward.python : &reward.plugin;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> config_path_keys(const Config& config) {
  std::vector<std::string> keys = {"model.path",         "data.train",       "data.val",
                                   "reward_model.train", "reward_model.val", "algorithm.plugin"};
  if (config.data.chat_template != "auto" && config.data.chat_template != "none") keys.push_back("data.chat_template");
  for (size_t i = 0; i < config.reward.size(); ++i) {
    keys.push_back("reward." + std::to_string(i) + ".plugin");
    keys.push_back("reward." + std::to_string(i) + ".python");
    keys.push_back("reward." + std::to_string(i) + ".model");
  }
  for (size_t i = 0; i < config.tools.size(); ++i) {
    keys.push_back("tools." + std::to_string(i) + ".python");
    keys.push_back("tools." + std::to_string(i) + ".plugin");
  }
  keys.push_back("environment.python");
  keys.push_back("environment.plugin");
  return keys;
}

void resolve_config_paths(LoadedConfig& loaded, const std::string& config_dir) {
  const fs::path base = fs::absolute(config_dir.empty() ? fs::path(".") : fs::path(config_dir));
  for (const std::string& key : config_path_keys(loaded.config)) {
    std::string* value = path_value(loaded.config, key);
    if (value->empty() || value->rfind("builtin:", 0) == 0 || fs::path(*value).is_absolute()) continue;
    const bool from_command_line = loaded.origin_of(key).rfind("--set", 0) == 0;
    const fs::path anchor = from_command_line ? fs::current_path() : base;
    *value = (anchor / *value).lexically_normal().string();
  }
  // python.path: a list, anchored like the keys above.
  const bool path_from_command_line = loaded.origin_of("python.path").rfind("--set", 0) == 0;
  for (std::string& directory : loaded.config.python.path) {
    if (fs::path(directory).is_absolute()) continue;
    directory = ((path_from_command_line ? fs::current_path() : base) / directory).lexically_normal().string();
  }
}

}  // namespace tandem
