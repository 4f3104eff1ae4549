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
  // `turn_frames`, `environment_template`: the JSON rollout_init carries; `eos_ids`: the
  // model's end-of-turn ids. With config.environment, its worker processes start here.
  RolloutMultiTurn(const Config& config, const std::string& model_dir, const std::string& turn_frames,
                   const std::string& environment_template, const std::vector<int32_t>& eos_ids);
  ~RolloutMultiTurn();

  // Every sample of `requests` to its end; `after_step` runs between engine steps and
  // tool waits (weight loads of partial rollouts). With an environment, `environment_rows`
  // holds each request's row (rollout_commands.capnp environmentRow): every sample gets
  // an instance whose reset() makes its prompt (samples of one request whose prompts
  // agree stay one request: their prompt is prefilled once).
  std::vector<Trajectory> generate(RolloutEngine& engine, const std::vector<GenerationRequest>& requests,
                                   const std::vector<std::string>& environment_rows,
                                   const std::function<void()>& after_step, MultiTurnStats* stats);

 private:
  MultiTurnConfig config_;
  std::vector<int32_t> eos_ids_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<ToolCallParser> parser_;
  std::unique_ptr<ChatTurnTemplate> turns_;
  std::unique_ptr<ToolRunner> runner_;
  std::unique_ptr<EnvironmentPool> environment_;
};

// What a trajectory's GeneratedSample carries besides its tokens (rollout_commands.capnp
// multiTurn): {"stop", "turns", "tool_calls", "tool_errors", "parse_errors",
// "tool_seconds", "messages": [{role, content, name?, begin, end, turn}],
// "kinds": [[first token, "policy" | "observation" | "template"], ...]}; with an
// environment also "environment_steps", "environment_reward", "prompt" (its token ids)
// and "prompt_messages" (reset()'s [{role, content}]).
nlohmann::json trajectory_record(const Trajectory& trajectory);

}  // namespace tandem
