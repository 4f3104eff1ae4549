// Chat-format prompts: message lists ([{role, content}]) rendered into the text the
// policy sees, with the model's chat template and Jinja2 (python/jinja_render.h).
//
// The template (data.chat_template):
//   auto   the model's: `chat_template.jinja` beside it, else tokenizer_config.json's
//          `chat_template` (a string, or a list of {name, template}: the one named
//          "default"); a model without one renders nothing (a message list is then an
//          error naming the row)
//   none   no template: message lists are an error
//   PATH   that Jinja file
// The template sees `messages`, `add_generation_prompt` (data.add_generation_prompt) and
// the special tokens tokenizer_config.json names (bos_token, eos_token, ...).
#pragma once

#include "controller/data/dataset.h"
#include "core/config.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>

namespace tandem {

struct ChatTemplate {
  std::string source;  // the Jinja text
  std::string origin;  // where it came from, for messages
  std::map<std::string, std::string> special_tokens;
};

// Errors name the file: an unreadable template, a tokenizer_config.json that is not JSON.
std::optional<ChatTemplate> find_chat_template(const std::string& setting, const std::string& model_dir);

// Replaces each message-list prompt of `data` by its rendering (and each string prompt,
// with data.prompt_as_user_message, by the rendering of [system?, user]). Errors name
// the row: a message list without a template, a template that raises or fails.
// `tools` (multi-turn): the tools' schemas, the template's `tools` variable; with any,
// every prompt must go through the template (a plain string prompt without
// data.prompt_as_user_message is an error naming the row), or the model would not see them.
// With an environment: the messages its prompts show before reset()'s: the row's message
// list, or [system?, user] for a string prompt (data.system_prompt), or [system?] for a
// row without one.
nlohmann::ordered_json messages_before_environment(const Dataset& data, size_t row, const DataConfig& config);

void render_chat_prompts(Dataset& data, const DataConfig& config, const std::optional<ChatTemplate>& chat_template,
                         const nlohmann::ordered_json& tools = nlohmann::ordered_json::array());

}  // namespace tandem
