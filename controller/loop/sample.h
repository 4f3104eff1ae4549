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
};

}  // namespace tandem::training
