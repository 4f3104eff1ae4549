#include "python/jinja_render.h"

#include "core/error.h"
#include "python/embedded_python.h"

#include <pybind11/embed.h>

#include <fmt/format.h>

#include <mutex>

namespace py = pybind11;

namespace tandem::python {

namespace {

// The environment, in Python: what transformers sets up around a chat template.
constexpr const char* kSetup = R"PY(
import json
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.sandbox


class TemplateError(Exception):
    pass


def _raise_exception(message):
    raise TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.now().strftime(format)


_environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
_environment.filters["tojson"] = _tojson
_environment.globals["raise_exception"] = _raise_exception
_environment.globals["strftime_now"] = _strftime_now
_compiled = {}


def render(source, variables_json):
    template = _compiled.get(source)
    if template is None:
        template = _environment.from_string(source)
        _compiled[source] = template
    return template.render(**json.loads(variables_json))
)PY";

py::object& renderer() {
  static py::object render;
  static std::once_flag made;
  std::call_once(made, [] {
    ensure_started();
    py::gil_scoped_acquire gil;
    py::dict scope;
    try {
      py::exec(kSetup, scope);
    } catch (const py::error_already_set& e) {
      throw Error(fmt::format("chat templates need Jinja2 in the embedded Python (Debian: apt install "
                              "python3-jinja2):\n{}",
                              describe(e)));
    }
    render = scope["render"];
  });
  return render;
}

}  // namespace

std::string render_chat_template(const std::string& source, const JinjaInputs& inputs) {
  py::object& render = renderer();
  nlohmann::ordered_json variables = inputs.extra;
  variables["messages"] = inputs.messages;
  variables["add_generation_prompt"] = inputs.add_generation_prompt;
  for (const auto& [name, token] : inputs.special_tokens) variables[name] = token;
  py::gil_scoped_acquire gil;
  try {
    return render(source, variables.dump()).cast<std::string>();
  } catch (const py::error_already_set& e) {
    // The last line holds the message (TemplateError: ..., TemplateSyntaxError: ... line N).
    std::string text = describe(e);
    const size_t last = text.rfind('\n');
    throw Error(last == std::string::npos ? text : text.substr(last + 1));
  }
}

std::string render_environment_prompt(const nlohmann::json& chat_template, const nlohmann::json& messages) {
  if (!chat_template.is_object() || !chat_template.contains("source") || !chat_template["source"].is_string()) {
    throw Error("no chat template was given to render the prompt");
  }
  JinjaInputs inputs;
  inputs.messages = nlohmann::ordered_json::parse(messages.dump());
  inputs.add_generation_prompt = true;
  // Named copies: a range-for over .items() of a temporary would read freed memory.
  const nlohmann::json special_tokens = chat_template.value("special_tokens", nlohmann::json::object());
  const nlohmann::json variables = chat_template.value("variables", nlohmann::json::object());
  for (const auto& [name, token] : special_tokens.items()) {
    if (token.is_string()) inputs.special_tokens[name] = token.get<std::string>();
  }
  for (const auto& [name, value] : variables.items()) inputs.extra[name] = nlohmann::ordered_json::parse(value.dump());
  return render_chat_template(chat_template["source"].get<std::string>(), inputs);
}

}  // namespace tandem::python
