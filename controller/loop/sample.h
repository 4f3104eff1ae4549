// One sampled response as the step loop carries it (controller/loop/).
#pragma once

#include "rewards/scoring.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::training {

// One sampled response with everything the step computes about it.
struct Sample {
  size_t prompt_slot = 0;  // index into the step's prompts
  int64_t sample_index = 0;  // which of the prompt's samples
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int64_t version = 0;  // the weights that drew its first token
  // Per token: the weights that drew it. Newer than `version` from some token on when the
  // rollout continued on weights synced part-way (algorithm.async.partial_rollouts).
  std::vector<int64_t> token_versions;
  std::string finish_reason;  // "stop" (end of sequence) or "length" (cut at max_new_tokens)
  std::string text;           // the decoded response, end-of-sequence tokens left out
  double reward = 0;          // the weighted sum over the config's rewards
  std::vector<RewardResult> reward_results;  // [config.reward entry]: its unweighted score and parts

  // Multi-turn (the config lists tools): `tokens` is the whole trajectory after the
  // prompt, `text` its last assistant message.
  bool multi_turn = false;
  std::vector<float> loss_mask;  // per token: 1 where the policy drew it, 0 on tool messages and template tokens
  std::string stop_reason;       // eos | length | max_turns | max_total_tokens | tool_timeout | tool_error | env_done
  std::string conversation;      // JSON {"messages": [...], "stop_reason": ...}: what rewards and samples.jsonl get
  int64_t turns = 0, tool_calls = 0, tool_errors = 0, parse_errors = 0;
  double tool_seconds = 0;
  std::pair<int64_t, int64_t> last_assistant{0, 0};  // its tokens [first, second)
  // With an environment: the prompt its reset() made (else empty: the step's prompt),
  // and its step() rewards, summed (added to `reward`).
  std::vector<int32_t> prompt;
  double environment_reward = 0;
  int64_t environment_steps = 0;
};

}  // namespace tandem::training
