#include "controller/data/chat_prompts.h"

#include "core/error.h"
#include "core/files.h"
#include "python/jinja_render.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tandem {

namespace {

namespace fs = std::filesystem;

std::string read_template_file(const std::string& path) {
  std::optional<std::string> text = read_file(path);
  if (!text) throw Error(fmt::format("cannot read the chat template {}: {}", path, std::strerror(errno)));
  return *text;
}

// A special token as tokenizer_config.json writes it: "<s>", {"content": "<s>", ...} or null.
std::optional<std::string> token_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return std::nullopt;
}

nlohmann::ordered_json messages_for_string(const std::string& prompt, const DataConfig& config) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!config.system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", config.system_prompt}});
  messages.push_back({{"role", "user"}, {"content", prompt}});
  return messages;
}

}  // namespace

std::optional<ChatTemplate> find_chat_template(const std::string& setting, const std::string& model_dir) {
  if (setting == "none") return std::nullopt;
  ChatTemplate found;
  const std::string config_path = model_dir + "/tokenizer_config.json";
  nlohmann::json tokenizer_config = nlohmann::json::object();
  if (std::optional<std::string> text = read_file(config_path)) {
    try {
      tokenizer_config = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("{}: not valid JSON: {}", config_path, e.what()));
    }
  }
  if (tokenizer_config.is_object()) {
    for (const auto& [key, value] : tokenizer_config.items()) {
      if (key.size() > 6 && key.compare(key.size() - 6, 6, "_token") == 0) {
        if (std::optional<std::string> token = token_text(value)) found.special_tokens[key] = *token;
      }
    }
  }
  if (setting != "auto") {
    found.source = read_template_file(setting);
    found.origin = setting;
    return found;
  }
  const std::string jinja_path = model_dir + "/chat_template.jinja";
  if (fs::exists(jinja_path)) {
    found.source = read_template_file(jinja_path);
    found.origin = jinja_path;
    return found;
  }
  const nlohmann::json chat_template =
      tokenizer_config.is_object() ? tokenizer_config.value("chat_template", nlohmann::json()) : nlohmann::json();
  if (chat_template.is_string()) {
    found.source = chat_template.get<std::string>();
  } else if (chat_template.is_array()) {
    for (const nlohmann::json& entry : chat_template) {
      if (entry.value("name", "") == "default" && entry.contains("template")) found.source = entry["template"];
    }
    if (found.source.empty()) {
      throw Error(fmt::format("{}: chat_template is a list without an entry named \"default\"", config_path));
    }
  } else {
    return std::nullopt;
  }
  found.origin = config_path;
  return found;
}

nlohmann::ordered_json messages_before_environment(const Dataset& data, size_t row, const DataConfig& config) {
  if (row < data.prompt_messages.size() && !data.prompt_messages[row].is_null()) return data.prompt_messages[row];
  if (data.rows.at(row).count(data.prompt_key)) return messages_for_string(data.prompt(row), config);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!config.system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", config.system_prompt}});
  return messages;
}

void render_chat_prompts(Dataset& data, const DataConfig& config, const std::optional<ChatTemplate>& chat_template,
                         const nlohmann::ordered_json& tools) {
  for (size_t row = 0; row < data.rows.size(); ++row) {
    const bool has_messages = row < data.prompt_messages.size() && !data.prompt_messages[row].is_null();
    if (!has_messages && !config.prompt_as_user_message) {
      if (!tools.empty()) {
        throw Error(fmt::format("{}: the prompt is plain text, so the chat template never shows it the tools the "
                                "config lists; give message-list prompts or set data.prompt_as_user_message: true",
                                data.where(row)));
      }
      continue;
    }
    if (!chat_template) {
      throw Error(fmt::format(
          "{}: the prompt {} but there is no chat template to render it ({}); set data.chat_template to a Jinja "
          "file{}",
          data.where(row), has_messages ? "is a list of chat messages" : "is to become a user message",
          config.chat_template == "none" ? "data.chat_template is none" : "the model's tokenizer_config.json has none",
          has_messages ? ", or give plain-text prompts" : ""));
    }
    python::JinjaInputs inputs;
    inputs.messages = has_messages ? data.prompt_messages[row] : messages_for_string(data.prompt(row), config);
    inputs.add_generation_prompt = config.add_generation_prompt;
    inputs.special_tokens = chat_template->special_tokens;
    if (!tools.empty()) inputs.extra["tools"] = tools;
    try {
      data.rows[row][data.prompt_key] = python::render_chat_template(chat_template->source, inputs);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: rendering the prompt with the chat template ({}) failed: {}", data.where(row),
                              chat_template->origin, e.what()));
    }
  }
}

}  // namespace tandem
