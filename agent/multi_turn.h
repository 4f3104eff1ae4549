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
#pragma once

#include "agent/tool_call_parser.h"
#include "agent/tool_runner.h"
#include "agent/trajectory.h"
#include "agent/turn_renderer.h"
#include "rollout/engine.h"

#include <cstdint>
#include <functional>
#include <map>
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
};

class MultiTurnRollout {
 public:
  // All are borrowed and must outlive run(). `decode` turns a model turn into the text of
  // its assistant message.
  MultiTurnRollout(RolloutEngine& engine, const TurnRenderer& renderer, ToolCallParser& parser, ToolRunner& tools,
                   const MultiTurnOptions& options, Detokenizer decode);

  // Runs every sample of `requests` (their max_new_tokens is replaced by the options') to
  // its end. Trajectories in request order, then sample index.
  std::vector<Trajectory> run(const std::vector<GenerationRequest>& requests);
  const MultiTurnStats& stats() const { return stats_; }

 private:
  struct Open {  // a trajectory not ended yet
    Trajectory trajectory;
    uint64_t session = 0;
    int32_t last_model_token = 0;
  };
  void on_turn(const GeneratedSample& turn);
  void on_outcome(const ToolOutcome& outcome);
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
  struct HeldTurn {  // lockstep: a continuation waiting for the round to end
    uint64_t session;
    std::vector<int32_t> tokens;
    int64_t max_new_tokens;
  };
  std::vector<HeldTurn> held_;
  std::vector<Trajectory> done_;
};

}  // namespace tandem
