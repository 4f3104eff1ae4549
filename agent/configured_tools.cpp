#include "agent/configured_tools.h"

#include "agent/http_tool.h"
#include "agent/plugin_agents.h"
#include "agent/python_environment.h"
#include "agent/python_sandbox_tool.h"
#include "agent/python_tool.h"
#include "core/error.h"

#include <algorithm>

namespace tandem {

namespace {

int default_workers(const Config& config, int64_t workers) {
  return static_cast<int>(workers > 0 ? workers : std::min<int64_t>(4, config.rollout.multi_turn.tool_concurrency));
}

}  // namespace

std::shared_ptr<Tool> make_configured_tool(const Config& config, size_t index) {
  const ToolConfig& t = config.tools.at(index);
  if (!t.python.empty()) {
    PythonFunctionToolOptions o;
    o.file = t.python;
    o.function = t.function;
    o.name = t.name;
    o.parameters = nlohmann::ordered_json::parse(t.schema);
    o.description = t.description;
    o.workers = default_workers(config, t.workers);
    o.timeout_s = t.timeout_s;
    o.search_path = config.python.path;
    return make_python_function_tool(o);
  }
  if (!t.plugin.empty()) return make_plugin_tool(t.name);  // the library was loaded with the config's plugins
  if (t.builtin == "python") {
    PythonToolOptions o;
    o.limits.wall_s = t.timeout_s;
    o.limits.cpu_s = t.timeout_s;
    o.limits.memory_mb = t.memory_mb;
    return make_python_sandbox_tool(o);
  }
  HttpToolOptions o;
  o.url = t.http;
  o.name = t.name;
  o.description = t.description;
  o.parameters = nlohmann::ordered_json::parse(t.schema);
  o.timeout_s = t.timeout_s;
  return make_http_tool(o);
}

std::unique_ptr<EnvironmentPool> make_configured_environment(const Config& config, const nlohmann::json& chat_template) {
  const EnvironmentConfig& e = config.environment;
  if (!e.plugin.empty()) return make_plugin_environment_pool(e.name, nlohmann::json::parse(e.kwargs), chat_template);
  PythonEnvironmentOptions o;
  o.file = e.python;
  o.class_name = e.class_name;
  o.kwargs = nlohmann::json::parse(e.kwargs);
  o.workers = default_workers(config, e.workers);
  o.timeout_s = e.timeout_s;
  o.chat_template = chat_template;
  o.search_path = config.python.path;
  return make_python_environment_pool(o);
}

std::vector<std::shared_ptr<Tool>> make_configured_tools(const Config& config) {
  std::vector<std::shared_ptr<Tool>> tools;
  for (size_t i = 0; i < config.tools.size(); ++i) {
    try {
      tools.push_back(make_configured_tool(config, i));
    } catch (const Error& e) {
      throw Error(fmt::format("tools.{}: {}", i, e.what()));
    }
  }
  return tools;
}

}  // namespace tandem
