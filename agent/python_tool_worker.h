// The process that runs a Python tool (`tools: [{python: FILE.py, function: NAME}]`):
// `tandem tool-worker --file F --function NAME [--name TOOL] [--path DIR]...`, started by
// a rollout worker's tool pool (agent/python_tool.h), never by users.
//
// Protocol: one JSON object per line. The worker imports F and writes
//   {"ready": true, "schema": {"type": "function", "function": {name, description, parameters}}}
// with the schema made from the function's signature (parameter names, annotations as
// JSON types, defaults deciding `required`) and its docstring (the text before an
// Args:/Parameters: section is the description; "name: text" or "name (type): text" lines
// in that section describe the parameters), or {"error": TEXT} and exits 1. Then per
// request line {"arguments": {...}} it calls the function by keyword and writes
//   {"output": TEXT}   the return value: a string as is, anything else as JSON (or str())
//   {"error": TEXT}    arguments the signature cannot bind, or the exception's traceback
// both of which the model reads. End of input ends the worker. What the function prints
// goes to stderr (the worker's log).
#pragma once

#include <string>
#include <vector>

namespace tandem::python {

struct ToolWorkerOptions {
  std::string file;
  std::string function;
  std::string name;                      // the tool's name; empty: the function's
  std::vector<std::string> search_path;  // python.path
};

int run_tool_worker(const ToolWorkerOptions& options);

}  // namespace tandem::python
