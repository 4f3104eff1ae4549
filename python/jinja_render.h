// Chat templates rendered by Jinja2 itself (Debian's python3-jinja2, in the embedded
// interpreter), set up as Hugging Face transformers' apply_chat_template sets it up:
// a sandboxed environment with trim_blocks and lstrip_blocks, the loopcontrols extension,
// a `tojson` filter that keeps non-ASCII text, and the globals raise_exception(message)
// and strftime_now(format).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>

namespace tandem::python {

struct JinjaInputs {
  nlohmann::ordered_json messages;  // [{role, content, ...}]
  bool add_generation_prompt = true;
  std::map<std::string, std::string> special_tokens;  // bos_token, eos_token, ...: template variables
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();     // more template variables (enable_thinking: false)
};

// The template's text for `inputs`. A template that does not compile, or that raises
// (raise_exception, an undefined attribute), is a tandem::Error with Jinja2's message
// and line.
std::string render_chat_template(const std::string& source, const JinjaInputs& inputs);

// An environment's prompt: `messages` through the template given as JSON {"source",
// "special_tokens": {...}, "variables": {...}} (RunInputs::environment_template), ending
// with the assistant's header. Errors as above.
std::string render_environment_prompt(const nlohmann::json& chat_template, const nlohmann::json& messages);

}  // namespace tandem::python
