// The tools a config lists (`tools:`) and its environment, made and started: Python functions (their
// tool-worker processes importing the file), the sandboxed Python interpreter. The
// rollout workers make them at rollout_init; `validate` and `run` make them once before
// anything starts, to check them and read their schemas.
#pragma once

#include "agent/environment.h"
#include "agent/tool.h"
#include "core/config.h"

#include <memory>
#include <vector>

namespace tandem {

// config.tools[index]. Errors say what failed (an import, a missing function).
std::shared_ptr<Tool> make_configured_tool(const Config& config, size_t index);
// All of them; errors name the entry (tools.N).
std::vector<std::shared_ptr<Tool>> make_configured_tools(const Config& config);
// config.environment's pool (its workers started), rendering prompts with
// `chat_template` ({"source", "special_tokens", "variables"}). Errors name the file.
std::unique_ptr<EnvironmentPool> make_configured_environment(const Config& config, const nlohmann::json& chat_template);

}  // namespace tandem
