// The --set overrides of a config load (`tandem ... --set key.path=value`): each is parsed
// as YAML and written into the document before it is read, and every key path it touches
// is recorded as set by it, for messages. `reward[0].weight` is accepted as
// `reward.0.weight`; a list the file leaves out starts from its default, so that an index
// into it has something to change. Reading the document is core/config_load.cpp.
#include "core/config.h"
#include "core/config_load_context.h"
#include "core/text.h"

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::config_load {
namespace {

// The default config's value at a key path (undefined when there is none).
YAML::Node default_node(const std::string& key_path) {
  static const YAML::Node defaults = YAML::Load(config_to_yaml(Config{}));
  YAML::Node current = defaults;
  for (const std::string& part : split(key_path, '.')) {
    if (!current.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& read_only = current;  // const lookups never insert into the defaults
    YAML::Node next = read_only[part];
    if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    current.reset(next);
  }
  return current;
}

}  // namespace

namespace {

// `reward[0].weight` is accepted as `reward.0.weight`, the spelling messages use. Returns
// what is wrong with `written` (empty when nothing is): a bracket that is not `[digits]`
// after a name, followed by `.`, `[` or the end. (Empty parts are found by the caller.)
std::string normalise_key_path(const std::string& written, std::string& key_path) {
  key_path.clear();
  size_t i = 0;
  while (i < written.size()) {
    const char ch = written[i];
    if (ch == '[') {
      const size_t close = written.find(']', i);
      const std::string index = close == std::string::npos ? "" : written.substr(i + 1, close - i - 1);
      if (close == std::string::npos || index.empty() || index.find_first_not_of("0123456789") != std::string::npos) {
        return fmt::format("key \"{}\": a list index is written [N] (e.g. reward[0].weight); column {}", written,
                           i + 1);
      }
      if (key_path.empty() || key_path.back() == '.') {
        return fmt::format("key \"{}\": [{}] must follow a key name; column {}", written, index, i + 1);
      }
      key_path += "." + index;
      i = close + 1;
      if (i < written.size() && written[i] != '.' && written[i] != '[') {
        return fmt::format("key \"{}\": expected . or [ after [{}]; column {}", written, index, i + 1);
      }
      continue;
    }
    if (ch == ']') return fmt::format("key \"{}\": ] without [; column {}", written, i + 1);
    key_path += ch;
    ++i;
  }
  return {};
}

}  // namespace

// Applies one `key.path=value` override to the document, recording its origin.
void apply_override(YAML::Node& root, const std::string& text, LoadContext& context) {
  std::string origin = "--set " + text;
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    context.problems.push_back(fmt::format("{}: expected key.path=value", origin));
    return;
  }
  std::string key_path;
  if (std::string problem = normalise_key_path(text.substr(0, eq), key_path); !problem.empty()) {
    context.problems.push_back(fmt::format("{}: {}", origin, problem));
    return;
  }
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    context.problems.push_back(fmt::format("{}: {}: value is not valid YAML: {}", origin, key_path, e.msg));
    return;
  }
  std::vector<std::string> parts = split(key_path, '.');
  YAML::Node current;
  current.reset(root);
  std::string path;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (part.empty()) {
      context.problems.push_back(fmt::format("{}: {}: empty key in the path", origin, key_path));
      return;
    }
    path = join_path(path, part);
    context.override_origins[path] = origin;
    bool last = i + 1 == parts.size();
    if (last) context.set_values[path] = origin;
    if (current.IsSequence()) {
      int64_t index = -1;
      if (!parse_int(part, index) || index < 0 || static_cast<size_t>(index) >= current.size()) {
        context.problems.push_back(fmt::format("{}: {}: expected a list index below {}, got {}", origin, path,
                                               current.size(), quoted(part)));
        return;
      }
      if (last) {
        current[static_cast<size_t>(index)] = value;
        return;
      }
      YAML::Node next = current[static_cast<size_t>(index)];
      current.reset(next);
      continue;
    }
    if (!current.IsDefined() || current.IsNull()) current = YAML::Node(YAML::NodeType::Map);
    if (!current.IsMap()) {
      context.problems.push_back(
          fmt::format("{}: {}: cannot set a key inside {}", origin, path, describe_found(current)));
      return;
    }
    if (last) {
      current[part] = value;
      return;
    }
    if (!current[part].IsDefined()) {
      // A list the file leaves out (reward) starts from its default so that
      // `--set reward.0.weight=2` has an element 0 to change.
      YAML::Node default_value = default_node(path);
      if (default_value.IsSequence()) {
        current[part] = YAML::Clone(default_value);
        context.cloned_defaults[path] = origin;
      }
    }
    YAML::Node next = current[part];  // creates a null entry when missing; filled next round
    current.reset(next);
  }
}

}  // namespace tandem::config_load
