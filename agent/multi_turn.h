// Multi-turn rollouts with tools over one rollout engine (issue 28): each sample is an
// engine session. A turn stops at the tool call's closing token; the call runs on the
// ToolRunner while the rest of the batch decodes; its result, rendered by the chat
// template (TurnRenderer), is appended and only those tokens are prefilled. Every token
// is recorded with its log-prob, weight version, kind and turn; every trajectory ends
// with a typed reason.
//
// Budgets: at most max_turns model turns; at most max_total_tokens tokens after the
// prompt (model and rendered messages together), each turn's max_new_tokens shrinking to
// what is left; each tool message's content cut to max_tool_output_tokens.
//
// Malformed calls are not silent ends: the parser's error message is the tool message the
// model reads next (counted as a parse error).
//
// With an environment (agent/environment.h), a model turn without a tool call is its
// action (also one cut at max_new_tokens): step() runs on the ToolRunner like a call,
// its reward adds to the trajectory's, and its observation is the next user message,
// until it says done (env_done), the turns run out (max_turns; the last action is still
// stepped, for its reward) or it has nothing more to say (env_done). An observation of
// several messages is read as one user message (their contents joined by a blank line):
// the template's frame was probed for that.
#pragma once

#include "agent/environment.h"
#include "agent/tool_call_parser.h"
#include "agent/tool_runner.h"
#include "agent/trajectory.h"
#include "agent/turn_renderer.h"
#include "rollout/engine.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

namespace tandem {

struct MultiTurnOptions {
  int64_t max_turns = 4;             // rollout.multi_turn.max_turns
  int64_t max_total_tokens = 2048;   // rollout.multi_turn.max_total_tokens
  int64_t max_new_tokens = 512;      // per turn (rollout.max_new_tokens)
  int64_t max_tool_output_tokens = 256;  // rollout.multi_turn.max_tool_output_tokens
  // Benchmark baseline only (how TRL runs tools): no turn continues until every sample's
  // turn has ended and every tool call of the round has returned.
  bool lockstep = false;
  // Runs after every engine step and tool wait (the rollout worker loads weights there:
  // partial rollouts).
  std::function<void()> after_step;
};

struct MultiTurnStats {
  int64_t trajectories = 0;
  int64_t model_turns = 0;
  int64_t tool_calls = 0;
  int64_t tool_errors = 0;
  int64_t parse_errors = 0;
  int64_t tool_unavailable = 0;  // machinery failures (sample dropped), not the model's doing
  double tool_seconds = 0;
  std::map<StopReason, int64_t> stops;
  int64_t kv_pinned_blocks_max = 0;
  int64_t evicted_sessions = 0;
  int64_t session_tokens_reused = 0;  // prefill the sessions saved
  int64_t environment_steps = 0;
  double environment_reward = 0;  // summed over the trajectories
};

// Which environment instance each sample talks to.
struct EnvironmentBinding {
  EnvironmentPool* pool = nullptr;
  std::map<std::pair<uint64_t, int64_t>, uint64_t> instances;  // (request id, sample index) -> instance
};

class MultiTurnRollout {
 public:
  // All are borrowed and must outlive run(). `decode` turns a model turn into the text of
  // its assistant message.
  MultiTurnRollout(RolloutEngine& engine, const TurnRenderer& renderer, ToolCallParser& parser, ToolRunner& tools,
                   const MultiTurnOptions& options, Detokenizer decode);

  // Runs every sample of `requests` (their max_new_tokens is replaced by the options') to
  // its end. Trajectories in request order, then sample index.
  // With `environment`, every sample has its instance there; they are closed as their
  // trajectories end.
  std::vector<Trajectory> run(const std::vector<GenerationRequest>& requests,
                              const EnvironmentBinding* environment = nullptr);
  const MultiTurnStats& stats() const { return stats_; }

 private:
  struct Open {  // a trajectory not ended yet
    Trajectory trajectory;
    uint64_t session = 0;
    int32_t last_model_token = 0;
    std::optional<uint64_t> environment;  // its instance
  };
  void on_turn(const GeneratedSample& turn);
  void on_outcome(const ToolOutcome& outcome);
  void on_environment_step(Open& open, const ToolResult& result);
  void observe(Open& open, std::vector<TrajectoryMessage> messages);
  void end(Open& open, StopReason reason);
  void release_held();

  RolloutEngine& engine_;
  const TurnRenderer& renderer_;
  ToolCallParser& parser_;
  ToolRunner& tools_;
  MultiTurnOptions options_;
  Detokenizer decode_;
  MultiTurnStats stats_;
  std::map<uint64_t, Open> open_;              // by session
  std::map<uint64_t, uint64_t> waiting_tool_;  // ticket -> session
  std::set<uint64_t> environment_tickets_;     // those of waiting_tool_ that are environment steps
  const EnvironmentBinding* environment_ = nullptr;
  std::shared_ptr<Tool> environment_step_;     // runs a step on the ToolRunner
  struct HeldTurn {  // lockstep: a continuation waiting for the round to end
    uint64_t session;
    std::vector<int32_t> tokens;
    int64_t max_new_tokens;
  };
  std::vector<HeldTurn> held_;
  std::vector<Trajectory> done_;
};

}  // namespace tandem
