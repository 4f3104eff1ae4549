// A Python function as a tool (`tools: [{python: FILE.py, function: NAME}]`), run by a
// pool of `tandem tool-worker` processes (agent/python_tool_worker.h) so that calls run
// in parallel and a call that hangs or crashes costs one process, not the rollout worker.
//
// A call takes an idle worker (waiting for one when all are busy), sends the arguments
// and reads the answer until the tool's timeout. Past it the worker is killed and
// replaced, and the call is a `tool_timeout` stop. A worker that dies mid-call is
// replaced and the call is ToolUnavailable (the tool runner retries it once). The
// function's return value or its exception's traceback is what the model reads.
#pragma once

#include "agent/tool.h"

#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct PythonFunctionToolOptions {
  std::string file;
  std::string function;
  std::string name;                      // the tool's name; empty: the function's
  nlohmann::ordered_json parameters;     // the parameters' schema; null or {}: the worker's, from the signature
  std::string description;               // empty: the docstring's
  int workers = 2;
  double timeout_s = 10.0;
  std::vector<std::string> search_path;  // python.path
  std::string tandem_binary;             // runs `tool-worker`; empty: this process's executable
  std::string log_path;                  // the workers' stderr (what the function prints); empty: ours
};

// Starts the workers and waits until each has imported the file. An import error or a
// missing function is an Error naming the file and Python's message.
std::shared_ptr<Tool> make_python_function_tool(const PythonFunctionToolOptions& options);

}  // namespace tandem
