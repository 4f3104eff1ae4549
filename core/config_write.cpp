// Config -> YAML: the fully resolved config, every knob included.
#include "core/config.h"
#include "core/config_schema.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace tandem {
namespace {

class Writer {
 public:
  Writer(YAML::Emitter& out, bool explain) : out_(out), explain_(explain) {}

  void field(const std::string& key, double& value, const config_check::Number& check, const char* help) {
    // Shortest text that reads back as the same double.
    emit(key, fmt::format("{}", value), fmt::format("{} ({})", help, check.description));
  }
  void field(const std::string& key, int64_t& value, const config_check::Integer& check, const char* help) {
    emit(key, fmt::format("{}", value), fmt::format("{} ({})", help, check.description));
  }
  void field(const std::string& key, bool& value, const char* help) {
    emit(key, value ? "true" : "false", fmt::format("{} (true | false)", help));
  }
  void field(const std::string& key, std::string& value, const config_check::Choice& check, const char* help) {
    std::string allowed;
    for (const std::string& a : check.allowed) allowed += (allowed.empty() ? "" : " | ") + a;
    emit(key, value, fmt::format("{} (one of: {})", help, allowed));
  }
  void field(const std::string& key, std::string& value, const config_check::Text&, const char* help) {
    out_ << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
    comment(help);
  }
  void field(const std::string& key, std::string& json_text, const config_check::Mapping&, const char* help) {
    out_ << YAML::Key << key << YAML::Value;
    emit_json(nlohmann::json::parse(json_text));
    comment(help);
  }
  void field(const std::string& key, std::vector<std::string>& values, const config_check::TextList&,
             const char* help) {
    out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const std::string& value : values) out_ << YAML::DoubleQuoted << value;
    out_ << YAML::EndSeq;
    comment(help);
  }
  template <class Struct>
  void section(const std::string& key, Struct& value, const char* help) {
    out_ << YAML::Key << key;
    comment(help);
    out_ << YAML::Value << YAML::BeginMap;
    describe(*this, value);
    out_ << YAML::EndMap;
  }
  template <class Struct>
  void list(const std::string& key, std::vector<Struct>& values, const char* help) {
    out_ << YAML::Key << key;
    comment(help);
    out_ << YAML::Value << YAML::BeginSeq;
    for (auto& value : values) {
      out_ << YAML::BeginMap;
      describe(*this, value);
      out_ << YAML::EndMap;
    }
    out_ << YAML::EndSeq;
  }

 private:
  // Strings double-quoted, so "1" reads back as a string, not a number.
  void emit_json(const nlohmann::json& value) {
    if (value.is_object()) {
      out_ << YAML::Flow << YAML::BeginMap;
      for (const auto& [name, item] : value.items()) {
        out_ << YAML::Key << YAML::DoubleQuoted << name << YAML::Value;
        emit_json(item);
      }
      out_ << YAML::EndMap;
    } else if (value.is_array()) {
      out_ << YAML::Flow << YAML::BeginSeq;
      for (const nlohmann::json& item : value) emit_json(item);
      out_ << YAML::EndSeq;
    } else if (value.is_string()) {
      out_ << YAML::DoubleQuoted << value.get<std::string>();
    } else if (value.is_null()) {
      out_ << YAML::Null;
    } else if (value.is_boolean()) {
      out_ << value.get<bool>();
    } else {
      out_ << value.dump();  // a number: its shortest round-trip text
    }
  }
  void emit(const std::string& key, const std::string& value, const std::string& help) {
    out_ << YAML::Key << key << YAML::Value << value;
    comment(help);
  }
  void comment(const std::string& help) {
    if (explain_) out_ << YAML::Comment(help);
  }

  YAML::Emitter& out_;
  bool explain_;
};

}  // namespace

std::string config_to_yaml(const Config& config, bool explain) {
  Config copy = config;  // describe() takes non-const references; the writer only reads
  YAML::Emitter out;
  out << YAML::BeginMap;
  Writer writer(out, explain);
  describe(writer, copy);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace tandem
