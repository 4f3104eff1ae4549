// The multi-turn checks of load_run_inputs (run_inputs.h): tools, tool parser, chat template.
#include "controller/run/run_inputs.h"

#include "agent/chat_turn_template.h"
#include "agent/configured_tools.h"
#include "agent/plugin_agents.h"
#include "agent/tool_call_parser.h"
#include "core/config_error.h"
#include "python/jinja_render.h"

#include <fmt/format.h>

#include <algorithm>

namespace tandem {

namespace {

// The key a tool entry's kind sits at (its python, builtin or http), for messages.
std::string tool_key(const ToolConfig& t, size_t index) {
  const std::string base = "tools." + std::to_string(index);
  return base + (!t.python.empty() ? ".python" : !t.builtin.empty() ? ".builtin" : !t.plugin.empty() ? ".plugin" : ".http");
}

}  // namespace

void load_tools(const LoadedConfig& loaded, RunInputs& in) {
  const Config& c = loaded.config;
  auto fail = [&](const std::string& key, const std::string& message) {
    throw UsageError(fmt::format("{}: {}: {}", loaded.origin_of(key), key, message));
  };
  set_chat_template_renderer(python::render_environment_prompt);  // plugins' environments' prompts
  if (!in.chat_template) {
    fail("tools", "multi-turn rollouts render tool results with the chat template, and there is none (data.chat_template "
                  "is none, or the model's tokenizer_config.json has no chat_template)");
  }
  try {
    if (!c.tools.empty()) make_tool_parser(c.rollout.multi_turn.tool_parser, in.tokenizer);
  } catch (const Error& e) {
    fail("rollout.multi_turn.tool_parser", e.what());
  }
  // Each tool once, started and stopped: it imports, and it says its schema.
  for (size_t i = 0; i < c.tools.size(); ++i) {
    const std::string key = tool_key(c.tools[i], i);
    try {
      std::shared_ptr<Tool> tool = make_configured_tool(c, i);
      if (c.tools[i].builtin == "python") {
        // A probe: where the sandbox cannot be made (no bubblewrap, no user namespaces)
        // every call would fail; say so now.
        const ToolResult probe = tool->call({{"code", "print(6 * 7)"}});
        if (probe.observation.find("42") == std::string::npos) {
          throw Error("the sandbox's probe (print(6 * 7)) did not print 42: " + probe.observation.substr(0, 300));
        }
      }
      in.tool_schemas.push_back(tool->schema());
    } catch (const ToolUnavailable& e) {
      fail(key, std::string("the sandbox cannot run here: ") + e.what());
    } catch (const Error& e) {
      fail(key, e.what());
    }
  }
  const ChatTemplate& tmpl = *in.chat_template;
  auto render = [&](const nlohmann::ordered_json& messages, bool generation) {
    python::JinjaInputs inputs;
    inputs.messages = messages;
    inputs.add_generation_prompt = generation;
    inputs.special_tokens = tmpl.special_tokens;
    inputs.extra["tools"] = in.tool_schemas;
    return python::render_chat_template(tmpl.source, inputs);
  };
  try {
    // The template must show the model its tools, or it could not call them.
    const std::string shown = render(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi"}}}), true);
    for (const nlohmann::ordered_json& schema : in.tool_schemas) {
      const std::string name = schema["function"]["name"].get<std::string>();
      if (shown.find(name) == std::string::npos) {
        throw Error(fmt::format("the chat template ({}) does not show the tools in a prompt (tool {} is not in its "
                                "rendering): it ignores the `tools` variable; use a template with tool support",
                                tmpl.origin, name));
      }
    }
    const std::vector<int32_t> eos(in.model.eos_token_ids.begin(), in.model.eos_token_ids.end());
    ChatTurnTemplate turns(render, in.tokenizer, eos);
    // Tool results and environment replies; a template made without tools may have no
    // tool role, which an environment alone does not need.
    std::vector<std::vector<std::string>> roles = {{"user"}};
    if (!c.tools.empty()) roles.insert(roles.begin(), {"tool"});
    in.turn_frames = turn_frames_to_json(turns, roles).dump();
  } catch (const Error& e) {
    fail("data.chat_template", e.what());
  }
  if (c.has_environment()) {
    nlohmann::json variables = nlohmann::json::object();
    if (!in.tool_schemas.empty()) variables["tools"] = in.tool_schemas;
    in.environment_template =
        nlohmann::json{{"source", tmpl.source}, {"special_tokens", tmpl.special_tokens}, {"variables", variables}}.dump();
  }
}

void check_environment(const LoadedConfig& loaded, const RunInputs& in) {
  const Config& c = loaded.config;
  Config one = c;
  one.environment.workers = 1;
  std::unique_ptr<EnvironmentPool> pool;
  try {
    pool = make_configured_environment(one, nlohmann::json::parse(in.environment_template));
  } catch (const Error& e) {
    const std::string key = !c.environment.python.empty() ? "environment.python" : "environment.name";
    throw UsageError(fmt::format("{}: {}: {}", loaded.origin_of(key), key, e.what()));
  }
  // The first row's instance: reset() runs and its prompt fits.
  const nlohmann::json row = nlohmann::json::parse(in.environment_rows.at(0));
  const std::string where = row.value("where", std::string("the first row"));
  EnvironmentStart start;
  try {
    start = pool->start(row["row"], row["before"]);
  } catch (const Error& e) {
    throw UsageError(fmt::format("{}: the environment ({}) could not start on it: {}", where,
                                 !c.environment.python.empty() ? c.environment.python : c.environment.name, e.what()));
  }
  pool->close(start.id);
  const int64_t length = static_cast<int64_t>(in.tokenizer->encode(start.prompt).size());
  if (length > in.prompt_limit) {
    throw UsageError(fmt::format("{}: the prompt reset() made is {} tokens, over the limit of {} (the model's {} "
                                 "positions minus rollout.multi_turn.max_total_tokens, or data.max_prompt_length)",
                                 where, length, in.prompt_limit, in.model.max_position_embeddings));
  }
}

}  // namespace tandem
