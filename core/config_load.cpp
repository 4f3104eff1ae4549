// YAML -> Config: reads every declared knob, collects every problem, then checks the
// cross-field rules. Unknown and duplicate keys are errors; nothing is silently ignored.
// The --set overrides are applied first, by config_overrides.cpp.
#include "core/config.h"
#include "core/config_error.h"
#include "core/config_load_context.h"
#include "core/config_paths.h"
#include "core/config_rules.h"
#include "core/config_schema.h"
#include "core/files.h"
#include "core/foreign_names.h"
#include "core/text.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

namespace tandem {

namespace config_load {

std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// How a found value reads in a message: scalars quoted unless numeric, else its kind.
std::string describe_found(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      char* end = nullptr;
      errno = 0;
      std::strtod(s.c_str(), &end);
      bool numeric = !s.empty() && end == s.c_str() + s.size() && errno == 0;
      return numeric ? s : quoted(s);
    }
    default: return "an undefined value";
  }
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (end != s.c_str() + s.size() || errno != 0) return false;
  out = v;
  return true;
}

}  // namespace config_load

namespace {

using namespace config_load;

bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno == 0 && std::isfinite(out);
}

bool parse_bool(const std::string& s, bool& out) {
  if (s == "true" || s == "True" || s == "TRUE") {
    out = true;
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    out = false;
    return true;
  }
  return false;
}

// A YAML node as JSON: scalars typed as YAML's core schema reads them (plain scalars
// only: a quoted "1" stays a string). Map keys are their text.
nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: {
      nlohmann::json list = nlohmann::json::array();
      for (auto it = node.begin(); it != node.end(); ++it) list.push_back(yaml_to_json(*it));
      return list;
    }
    case YAML::NodeType::Map: {
      nlohmann::json object = nlohmann::json::object();
      for (auto it = node.begin(); it != node.end(); ++it) object[it->first.Scalar()] = yaml_to_json(it->second);
      return object;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() == "!") return s;  // quoted
      if (s == "null" || s == "Null" || s == "NULL" || s == "~") return nullptr;
      bool flag = false;
      if (parse_bool(s, flag)) return flag;
      int64_t integer = 0;
      if (parse_int(s, integer)) return integer;
      double number = 0;
      if (parse_double(s, number)) return number;
      return s;
    }
    default:
      return nullptr;
  }
}

// Reads one mapping node into one struct through its describe() declarations.
class Reader {
 public:
  Reader(const YAML::Node& node, std::string path, LoadContext& context)
      : node_(node), path_(std::move(path)), context_(context) {}

  void field(const std::string& key, double& value, const config_check::Number& check, const char*) {
    read_scalar(key, check.description, [&](const std::string& s, std::string&) {
      double v;
      if (!parse_double(s, v) || !check.allows(v)) return false;
      value = v;
      return true;
    });
  }
  void field(const std::string& key, int64_t& value, const config_check::Integer& check, const char*) {
    read_scalar(key, check.description, [&](const std::string& s, std::string&) {
      int64_t v;
      if (!parse_int(s, v) || !check.allows(v)) return false;
      value = v;
      return true;
    });
  }
  void field(const std::string& key, bool& value, const char*) {
    read_scalar(key, "true or false", [&](const std::string& s, std::string&) {
      return parse_bool(s, value);
    });
  }
  void field(const std::string& key, std::string& value, const config_check::Choice& check, const char*) {
    std::string allowed = "one of " + join_choices(check.allowed);
    read_scalar(key, allowed, [&](const std::string& s, std::string& hint) {
      if (check.allows(s)) {
        value = s;
        return true;
      }
      hint = foreign_name_hint(join_path(path_, key), s);
      const std::string guess = closest_match(s, check.allowed);
      if (hint.empty() && !guess.empty()) hint = fmt::format(" (did you mean {}?)", guess);
      return false;
    });
  }
  void field(const std::string& key, std::string& value, const config_check::Text& check, const char*) {
    const char* allowed = check.required ? "a non-empty string" : "a string";
    bool present = read_scalar(key, allowed, [&](const std::string& s, std::string&) {
      if (check.required && s.empty()) return false;
      value = s;
      return true;
    });
    if (!present && check.required && value.empty()) {
      context_.problem(context_.where(path_, node_.Mark()), join_path(path_, key), "missing (required)");
    }
  }

  void field(const std::string& key, std::string& json_text, const config_check::Mapping&, const char*) {
    YAML::Node value;
    std::string path, where;
    if (!find_declared(key, value, path, where)) return;
    if (value.IsNull()) {
      json_text = "{}";
    } else if (!value.IsMap()) {
      context_.problem(where, path, fmt::format("expected a mapping (name: value, ...), got {}", describe_found(value)));
    } else {
      json_text = yaml_to_json(value).dump();
    }
  }
  void field(const std::string& key, std::vector<std::string>& values, const config_check::TextList&, const char*) {
    YAML::Node value;
    std::string path, where;
    if (!find_declared(key, value, path, where)) return;
    values.clear();
    if (value.IsScalar()) {
      values.push_back(value.Scalar());
      return;
    }
    if (!value.IsSequence()) {
      if (!value.IsNull()) context_.problem(where, path, fmt::format("expected a list of strings, got {}", describe_found(value)));
      return;
    }
    for (size_t i = 0; i < value.size(); ++i) {
      if (!value[i].IsScalar() || value[i].Scalar().empty()) {
        context_.problem(where, fmt::format("{}.{}", path, i),
                         fmt::format("expected a non-empty string, got {}", describe_found(value[i])));
        continue;
      }
      values.push_back(value[i].Scalar());
    }
  }

  template <class Struct>
  void section(const std::string& key, Struct& value, const char*) {
    known_.push_back(key);
    YAML::Node child;
    YAML::Mark key_mark;
    if (!find(key, child, key_mark)) return;
    std::string path = join_path(path_, key);
    if (!child.IsMap()) {
      context_.problem(context_.where(path, key_mark), path,
                       fmt::format("expected a mapping, got {}", describe_found(child)));
      return;
    }
    context_.origins[path] = context_.where(path, key_mark);
    Reader reader(child, path, context_);
    describe(reader, value);
    reader.finish();
  }

  template <class Struct>
  void list(const std::string& key, std::vector<Struct>& values, const char*) {
    known_.push_back(key);
    YAML::Node child;
    YAML::Mark key_mark;
    if (!find(key, child, key_mark)) return;
    std::string path = join_path(path_, key);
    if (!child.IsSequence()) {
      context_.problem(context_.where(path, key_mark), path,
                       fmt::format("expected a list, got {}", describe_found(child)));
      return;
    }
    context_.origins[path] = context_.where(path, key_mark);
    values.clear();
    for (size_t i = 0; i < child.size(); ++i) {
      std::string item_path = fmt::format("{}.{}", path, i);
      const YAML::Node item = child[i];
      if (!item.IsMap()) {
        context_.problem(context_.where(item_path, item.Mark()), item_path,
                         fmt::format("expected a mapping, got {}", describe_found(item)));
        continue;
      }
      Struct value{};
      Reader reader(item, item_path, context_);
      describe(reader, value);
      reader.finish();
      values.push_back(value);
    }
  }

  // Unknown and duplicate keys: errors, with a did-you-mean from the declared keys.
  void finish() {
    std::set<std::string> seen;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      const YAML::Node key_node = it->first;  // a copy: the iterator's pair is a temporary
      std::string key = key_node.IsScalar() ? key_node.Scalar() : "<non-scalar key>";
      std::string path = join_path(path_, key);
      if (!seen.insert(key).second) {
        context_.problem(context_.where(path, key_node.Mark()), path, "duplicate key");
        continue;
      }
      bool known = false;
      for (const auto& k : known_) known = known || k == key;
      if (known) continue;
      std::string guess = closest_match(key, known_);
      std::string where = context_.where(path, key_node.Mark());
      if (const std::string verl = foreign_key_hint(path); !verl.empty()) {
        context_.problem(where, path, fmt::format("unknown key ({}; docs/from_verl.md)", verl));
        continue;
      }
      context_.problem(where, path,
                       guess.empty()
                           ? fmt::format("unknown key (allowed here: {})", join_choices(known_))
                           : fmt::format("unknown key (did you mean {}?)", join_path(path_, guess)));
    }
  }

 private:
  // Declares `key` and finds it: its value, its path and where it was set (recorded as
  // its origin). False when the mapping does not have it.
  bool find_declared(const std::string& key, YAML::Node& value, std::string& path, std::string& where) {
    known_.push_back(key);
    YAML::Mark key_mark;
    if (!find(key, value, key_mark)) return false;
    path = join_path(path_, key);
    where = context_.where(path, key_mark);
    context_.origins[path] = where;
    return true;
  }

  // Finds `key` in this mapping: its value node and the key's position.
  bool find(const std::string& key, YAML::Node& value, YAML::Mark& key_mark) const {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) {
        value.reset(it->second);
        key_mark = it->first.Mark();
        return true;
      }
    }
    return false;
  }

  // Reads a scalar; `accept` parses and checks it, and may add a hint to the error.
  // Returns whether the key was present.
  template <class Accept>
  bool read_scalar(const std::string& key, const std::string& allowed, Accept accept) {
    known_.push_back(key);
    YAML::Node value;
    YAML::Mark key_mark;
    if (!find(key, value, key_mark)) return false;
    std::string path = join_path(path_, key);
    std::string where = context_.where(path, key_mark);
    context_.origins[path] = where;
    std::string hint;
    if (!value.IsScalar() || !accept(value.Scalar(), hint)) {
      context_.problem(where, path, fmt::format("expected {}, got {}{}", allowed, describe_found(value), hint));
    }
    return true;
  }

  YAML::Node node_;
  std::string path_;
  LoadContext& context_;
  std::vector<std::string> known_;
};

LoadedConfig load_from_document(YAML::Node root, const std::string& source,
                                const std::vector<std::string>& overrides) {
  LoadContext context;
  context.source = source;
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) {
    throw ConfigError({fmt::format("{}: the config must be a mapping of sections, got {}", source,
                                   describe_found(root))});
  }
  for (const auto& text : overrides) apply_override(root, text, context);

  LoadedConfig loaded;
  loaded.source = source;
  {
    Reader reader(root, "", context);
    describe(reader, loaded.config);
    reader.finish();
  }
  loaded.origins = context.origins;
  // A python reward is named after its file, an http one "http", unless the entry names it.
  for (RewardConfig& reward : loaded.config.reward) {
    if (reward.name.empty() && !reward.python.empty()) reward.name = std::filesystem::path(reward.python).stem().string();
    if (reward.name.empty() && !reward.http.empty()) reward.name = "http";
    if (reward.name.empty() && !reward.model.empty()) reward.name = "reward_model";
  }
  if (context.problems.empty()) check_config_rules(loaded, context.problems);
  if (!context.problems.empty()) throw ConfigError(context.problems);
  return loaded;
}

// Configs are hand-written: a bigger file is a mistake (a dataset or model named instead).
constexpr uint64_t kMaxConfigBytes = 16ull << 20;

// A config is one YAML document: a second one (after ---) would be silently ignored.
YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  try {
    std::vector<YAML::Node> documents = YAML::LoadAll(text);
    if (documents.empty()) return YAML::Node();
    for (size_t i = 1; i < documents.size(); ++i) {
      if (documents[i].IsNull()) continue;  // a trailing "---" with nothing after it
      const YAML::Mark mark = documents[i].Mark();
      throw ConfigError({fmt::format("{}:{}:{}: a second YAML document (after ---); a config is one document: merge "
                                     "the two, or keep each in its own file",
                                     source, mark.line + 1, mark.column + 1)});
    }
    return documents.front();
  } catch (const YAML::Exception& e) {
    throw ConfigError({fmt::format("{}:{}:{}: invalid YAML: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg)});
  }
}

}  // namespace

ConfigError::ConfigError(std::vector<std::string> problems)
    : UsageError([&] {
        std::string all;
        for (auto& p : problems) {
          p = printable_message(p);
          all += (all.empty() ? "" : "\n") + p;
        }
        return all;
      }()),
      problems_(std::move(problems)) {}

std::string LoadedConfig::origin_of(const std::string& key_path) const {
  auto it = origins.find(key_path);
  return it == origins.end() ? source : it->second;
}

LoadedConfig load_config_text(const std::string& yaml_text, const std::string& source_name,
                              const std::vector<std::string>& overrides) {
  return load_from_document(parse_yaml(yaml_text, source_name), source_name, overrides);
}

LoadedConfig load_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::string text;
  try {
    text = read_input_file(path, kMaxConfigBytes);
  } catch (const Error& e) {
    throw ConfigError({fmt::format("{}: cannot read the config file: {}", path, e.what())});
  }
  YAML::Node root = parse_yaml(text, path);
  if (root.IsNull()) {
    // Most likely the wrong file, or one not saved yet: running the defaults would hide that.
    throw ConfigError({fmt::format("{}: the config file is empty; start from configs/quickstart.yaml "
                                   "(tandem validate --explain lists every key)",
                                   path)});
  }
  LoadedConfig loaded = load_from_document(root, path, overrides);
  resolve_config_paths(loaded, std::filesystem::path(path).parent_path().string());
  return loaded;
}

}  // namespace tandem
