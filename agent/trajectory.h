// A multi-turn trajectory as the learner and the logs see it (issue 28, items 3 and 7):
// the exact token sequence after the prompt, with a record per token, the conversation's
// messages with their token spans, and the typed reason it ended.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// Who wrote a token. Only `policy` tokens carry loss (and count in loss_agg); the others
// are read by the model but were not drawn from it.
enum class TokenKind : uint8_t {
  policy,       // sampled by the engine
  observation,  // a tool's or environment's message content
  template_,    // what the chat template puts around messages (role headers, turn ends)
};
const char* token_kind_name(TokenKind kind);  // "policy" | "observation" | "template"

enum class StopReason {
  eos,               // the model ended its answer
  length,            // a turn reached rollout.max_new_tokens
  max_turns,         // rollout.multi_turn.max_turns model turns, and it wanted another
  max_total_tokens,  // the trajectory's token budget is spent
  tool_timeout,      // a tool call ran past its deadline
  tool_error,        // the tool machinery failed (not the call): the sample is dropped
  env_done,          // the environment said done
};
const char* stop_reason_name(StopReason reason);
const std::vector<StopReason>& all_stop_reasons();

struct TrajectoryMessage {
  std::string role;     // "assistant" | "tool" | "user" (an environment's message)
  std::string content;  // as the model wrote it / as the tool or environment returned it
  std::string name;     // tool messages: the tool's name
  int64_t begin = 0;    // its tokens in Trajectory::tokens: [begin, end)
  int64_t end = 0;
  int32_t turn = 0;
};

struct Trajectory {
  uint64_t request_id = 0;
  int64_t sample_index = 0;
  std::vector<int32_t> tokens;          // everything after the prompt, in order
  std::vector<float> logprobs;          // policy tokens: the engine's; others 0
  std::vector<int64_t> token_versions;  // policy tokens: the weights that drew them; others: the version then
  std::vector<TokenKind> kinds;
  std::vector<int32_t> turns;           // per token: the model turn it belongs to or follows
  std::vector<TrajectoryMessage> messages;
  StopReason stop = StopReason::eos;
  int64_t model_turns = 0;
  int64_t tool_calls = 0;
  int64_t tool_errors = 0;   // calls that failed in a way the model reads (bad arguments, raised, killed)
  int64_t parse_errors = 0;  // malformed calls, shown to the model as errors
  double tool_seconds = 0;   // summed over its calls
  int64_t environment_steps = 0;
  double environment_reward = 0;  // the environment's rewards, summed
  // With an environment: the prompt its reset() made, and reset()'s messages.
  std::vector<int32_t> prompt;
  std::vector<TrajectoryMessage> prompt_messages;
};

}  // namespace tandem
