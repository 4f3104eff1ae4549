// Multi-turn generation in a rollout worker (issue 28): what rollout_init sets up when the
// config lists tools (the tools themselves, started once; the tool-call parser over the
// model's tokenizer; the chat template's turn frames the controller derived), and one
// rollout_generate's run of the driver (agent/multi_turn.h) over the worker's engine.
#pragma once

#include "agent/chat_turn_template.h"
#include "agent/multi_turn.h"
#include "core/config.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

class RolloutMultiTurn {
 public:
  // `turn_frames`: the JSON rollout_init carries; `eos_ids`: the model's end-of-turn ids.
  RolloutMultiTurn(const Config& config, const std::string& model_dir, const std::string& turn_frames,
                   const std::vector<int32_t>& eos_ids);

  // Every sample of `requests` to its end; `after_step` runs between engine steps and
  // tool waits (weight loads of partial rollouts).
  std::vector<Trajectory> generate(RolloutEngine& engine, const std::vector<GenerationRequest>& requests,
                                   const std::function<void()>& after_step, MultiTurnStats* stats);

 private:
  MultiTurnConfig config_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<ToolCallParser> parser_;
  std::unique_ptr<ChatTurnTemplate> turns_;
  std::unique_ptr<ToolRunner> runner_;
};

// What a trajectory's GeneratedSample carries besides its tokens (rollout_commands.capnp
// multiTurn): {"stop", "turns", "tool_calls", "tool_errors", "parse_errors",
// "tool_seconds", "messages": [{role, content, name?, begin, end, turn}],
// "kinds": [[first token, "policy" | "observation" | "template"], ...]}.
nlohmann::json trajectory_record(const Trajectory& trajectory);

}  // namespace tandem
