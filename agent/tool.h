// A tool the policy can call during a multi-turn rollout (issue 28, item 5): its name and
// JSON schema (what the chat template's `tools` variable lists), and the call itself.
//
// A call returns the observation the model reads next. Two kinds of failure stay apart:
// what the tool reports about the call (bad arguments, the code raised, a timeout) is a
// ToolResult the model sees, with `stop` set where it ends the trajectory; a failure of
// the machinery (the sandbox cannot be made, a worker died) is thrown as
// ToolUnavailable, for the caller to retry or to drop the sample and count it.
#pragma once

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <string>

namespace tandem {

struct ToolResult {
  std::string observation;  // what the model reads
  bool error = false;       // the call failed in a way the model caused (counted: multi_turn/tool_errors)
  std::string stop;         // "" or a stop reason for the trajectory ("tool_timeout")
  double seconds = 0;
  // An environment's step (agent/environment.h), run as a tool call: {"reward", "done",
  // "messages": [{role, content}]}; null for tools.
  nlohmann::json details;
};

class ToolUnavailable : public Error {
 public:
  using Error::Error;
};

class Tool {
 public:
  virtual ~Tool() = default;
  virtual std::string name() const = 0;
  // {"type": "function", "function": {"name", "description", "parameters"}}: the form
  // Hugging Face chat templates take in `tools`.
  virtual nlohmann::ordered_json schema() const = 0;
  // Runs one call. Throws ToolUnavailable for a failure of the machinery, not the call.
  virtual ToolResult call(const nlohmann::json& arguments) = 0;
};

}  // namespace tandem
