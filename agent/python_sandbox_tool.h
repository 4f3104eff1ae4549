// The `builtin: python` tool: runs the code the model passes ({"code": "..."}) in a fresh
// sandbox (agent/sandbox.h) and returns what it printed. A non-zero exit adds the end of
// stderr (the traceback) and the exit status; running past the deadline is a
// `tool_timeout` stop; killing by a limit (CPU, memory) is an error the model reads.
#pragma once

#include "agent/sandbox.h"
#include "agent/tool.h"

#include <cstddef>
#include <memory>

namespace tandem {

struct PythonToolOptions {
  SandboxLimits limits;
  // The observation is cut to this many bytes (the turn loop also cuts by tokens).
  size_t max_observation_bytes = 8192;
};

std::unique_ptr<Tool> make_python_sandbox_tool(const PythonToolOptions& options);

}  // namespace tandem
