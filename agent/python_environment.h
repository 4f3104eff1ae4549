// A Python environment class (`environment: {python: FILE.py, class: NAME}`) run by a
// pool of `tandem env-worker` processes (agent/python_environment_worker.h): instances
// live in the workers, spread over them; calls on one worker run one at a time, calls on
// different workers in parallel. A reset() or step() past timeout_s kills its worker;
// the other instances it held are lost (their next step is ToolUnavailable: dropped and
// counted), and a fresh worker takes its place.
#pragma once

#include "agent/environment.h"

#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct PythonEnvironmentOptions {
  std::string file;
  std::string class_name;
  nlohmann::json kwargs = nlohmann::json::object();  // more keyword arguments for __init__
  int workers = 2;
  double timeout_s = 10.0;
  // The chat template the prompts are rendered with: {"source", "special_tokens": {...},
  // "variables": {...}} (variables: more template variables, e.g. the tools).
  nlohmann::json chat_template;
  std::vector<std::string> search_path;  // python.path
  std::string tandem_binary;             // runs `env-worker`; empty: this process's executable
  std::string log_path;                  // the workers' stderr (what the environment prints); empty: ours
};

// Starts the workers and waits until each has imported the file and found the class. An
// import error, a missing class or methods with the wrong signatures are an Error naming
// the file and Python's message.
std::unique_ptr<EnvironmentPool> make_python_environment_pool(const PythonEnvironmentOptions& options);

}  // namespace tandem
