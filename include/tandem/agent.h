// Public plugin API for multi-turn RL: tools the policy calls and environments that
// reply to its turns, written in C++ (docs/agents.md). Registered from a plugin's
// registration function:
//
//   registry.add_tool("add", {"Adds two integers.", R"({"type": "object", ...})",
//                             [](const std::string& arguments_json) { return std::string("5"); }});
//   registry.add_environment("guess", [](const std::string& row_json, const std::string& kwargs_json) {
//     return std::make_unique<MyGame>(row_json);
//   });
//
// and named in the config: `tools: [{plugin: libmine.so, name: add}]`,
// `environment: {plugin: libmine.so, name: guess}`. Calls run on tandem's tool threads,
// several at once: a tool must be safe to call concurrently; an environment instance is
// only ever called by one thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

// A tool: what the chat template's `tools` list shows, and the call. `call` gets the
// call's arguments as JSON text and returns what the model reads; an exception is an
// error the model reads ("Error: " + what()).
struct PluginTool {
  std::string description;
  std::string parameters_json = R"({"type": "object", "properties": {}})";  // JSON schema of the arguments
  std::function<std::string(const std::string& arguments_json)> call;
};

struct EnvironmentMessage {
  std::string role = "user";
  std::string content;
};

struct EnvironmentStepResult {
  std::vector<EnvironmentMessage> observation;  // what the model reads next (one user message; empty: the end)
  double reward = 0;                            // must be finite
  bool done = false;
};

// One trajectory's environment. reset() gives the first message(s), rendered into the
// prompt by the chat template; step() takes the model's turn as text. An exception in
// step() is an error the model reads; in reset() or the factory, the row's error.
class Environment {
 public:
  virtual ~Environment() = default;
  virtual std::vector<EnvironmentMessage> reset() = 0;
  virtual EnvironmentStepResult step(const std::string& action) = 0;
};

// Makes an instance from the dataset row (a JSON object's text) and environment.kwargs
// (a JSON object's text).
using EnvironmentFactory =
    std::function<std::unique_ptr<Environment>(const std::string& row_json, const std::string& kwargs_json)>;

}  // namespace tandem
