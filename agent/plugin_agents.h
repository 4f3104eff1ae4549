// Tools and environments that C++ plugins register (include/tandem/agent.h), by name,
// and what makes them usable as the driver's Tool and EnvironmentPool.
//
// A plugin environment's prompt is rendered by the chat template in this process: the
// process sets the renderer once (set_chat_template_renderer: the controller and the
// worker processes, which embed Python's Jinja2), so this library needs no Python.
#pragma once

#include "agent/environment.h"
#include "agent/tool.h"

#include <nlohmann/json.hpp>
#include <tandem/agent.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

// Errors name the taken name.
void register_plugin_tool(const std::string& name, PluginTool tool);
void register_plugin_environment(const std::string& name, EnvironmentFactory factory);
// An Error naming what is registered when `name` is not.
std::shared_ptr<Tool> make_plugin_tool(const std::string& name);
void check_plugin_environment(const std::string& name);

// (template source, special tokens, variables, messages) -> the prompt text.
using ChatTemplateRenderer =
    std::function<std::string(const nlohmann::json& chat_template, const nlohmann::json& messages)>;
void set_chat_template_renderer(ChatTemplateRenderer renderer);

// Instances of environment `name`, made in this process; `chat_template` as
// PythonEnvironmentOptions::chat_template. A call runs on the caller's thread and is not
// stopped at a deadline (the tool runner answers a late one as a timeout and drops it).
std::unique_ptr<EnvironmentPool> make_plugin_environment_pool(const std::string& name, const nlohmann::json& kwargs,
                                                              const nlohmann::json& chat_template);

}  // namespace tandem
