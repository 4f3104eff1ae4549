// Private to the config loader (core/config_load.cpp reads the document,
// core/config_overrides.cpp applies --set overrides to it first): what one load shares,
// where each key path was set and every problem found so far, and the YAML helpers both
// use in their messages.
#pragma once

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem::config_load {

// Shared by all readers of one load: where things came from, and what went wrong.
struct LoadContext {
  std::string source;
  std::map<std::string, std::string> override_origins;  // key path -> "--set k=v"
  std::map<std::string, std::string> origins;           // key path -> where it was set
  std::vector<std::string> problems;

  // Lists copied from the defaults so that an override can index into them: their
  // marks point into the defaults' text, so they and their contents are the override's.
  std::map<std::string, std::string> cloned_defaults;  // key path -> "--set k=v"
  // The key paths a --set replaced whole (`reward=[...]`): everything under one is the --set's.
  std::map<std::string, std::string> set_values;  // key path -> "--set k=v"

  std::string where(const std::string& path, const YAML::Mark& mark) const {
    auto it = override_origins.find(path);
    if (it != override_origins.end()) return it->second;
    for (const auto* under : {&cloned_defaults, &set_values}) {
      for (const auto& [prefix, origin] : *under) {
        if (path == prefix || path.rfind(prefix + ".", 0) == 0) return origin;
      }
    }
    if (mark.is_null()) return source;
    return fmt::format("{}:{}:{}", source, mark.line + 1, mark.column + 1);
  }
  void problem(const std::string& where, const std::string& path, const std::string& what) {
    problems.push_back(fmt::format("{}: {}: {}", where, path, what));
  }
};

// `prefix.key`, or `key` at the top.
std::string join_path(const std::string& prefix, const std::string& key);
// How a found value reads in a message: scalars quoted unless numeric, else its kind.
std::string describe_found(const YAML::Node& node);
// A whole base-10 integer (strtoll); false for anything else.
bool parse_int(const std::string& s, int64_t& out);

// Applies one `key.path=value` override to the document, recording its origin
// (config_overrides.cpp).
void apply_override(YAML::Node& root, const std::string& text, LoadContext& context);

}  // namespace tandem::config_load
