// An environment the policy talks to over several turns (issue 28, item 5): games,
// checkers, simulators. One instance per trajectory, made from the dataset row; reset()
// gives the first user message(s), which the chat template renders into the prompt;
// each model turn without a tool call is an action, answered by an observation (the
// next message(s) the model reads), a reward, and whether the episode is done.
//
// Failures keep the two kinds tools have (agent/tool.h): what the environment's code
// raised is an error the model reads (step) or the row's problem (start); a failure of the
// machinery (its worker died, was killed past its deadline) is ToolUnavailable: the
// trajectory is dropped and counted.
#pragma once

#include "agent/tool.h"

#include <nlohmann/json.hpp>
#include <tandem/agent.h>  // EnvironmentMessage, and C++ plugins' environments

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct EnvironmentStart {
  uint64_t id = 0;                           // the instance, for step() and close()
  std::vector<EnvironmentMessage> messages;  // what reset() returned
  std::string prompt;                        // the prompt text: the messages rendered by the chat template
};

struct EnvironmentStep {
  std::vector<EnvironmentMessage> messages;  // the observation (empty: nothing more to say)
  double reward = 0;
  bool done = false;
  bool error = false;     // step() raised: `messages` holds the error for the model
  bool timeout = false;   // step() ran past its deadline
  double seconds = 0;
};

class EnvironmentPool {
 public:
  virtual ~EnvironmentPool() = default;
  // Makes an instance for `row` (the dataset row as rewards see it) and resets it. The
  // prompt shows `before` (messages the row brings: a system prompt, its own prompt)
  // then reset()'s. An Error names what was wrong (the constructor or reset() raised,
  // returned something that is not a message); ToolUnavailable: the machinery failed.
  virtual EnvironmentStart start(const nlohmann::json& row, const nlohmann::json& before) = 0;
  // One action (the model's turn, decoded). Safe to call from several threads at once for
  // different instances. Throws ToolUnavailable when the instance is lost.
  virtual EnvironmentStep step(uint64_t id, const std::string& action) = 0;
  virtual void close(uint64_t id) = 0;
};

}  // namespace tandem
