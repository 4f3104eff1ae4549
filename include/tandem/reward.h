// Public plugin API: reward functions.
//
// A reward function scores one sample: the prompt, the response (text and token ids) and
// the dataset row it came from. The config names it in `reward: [{name, plugin, weight}]`;
// the step's reward is the weighted sum of every listed function's score.
//
// Contract: return a finite score (NaN or inf is an error naming the function and the
// sample); throw to report a sample you cannot score (an error too, unless the config
// gives a fallback). Functions may be called from several threads at once: keep them
// free of shared mutable state.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

struct RewardInput {
  const std::string& prompt;                     // the prompt text the policy saw
  const std::string& response;                   // the decoded response
  const std::vector<int32_t>& response_ids;      // its token ids
  const std::map<std::string, std::string>& row; // the dataset row: string fields as they are,
                                                 //   other values as JSON text ("42", "[1,2]")
  // Multi-turn samples (the config lists tools): JSON text {"messages": [{role, content,
  // ...}, ...], "stop_reason": "eos" | "length" | "max_turns" | ...}, the whole
  // conversation after the prompt; `response` is then the last assistant message.
  // Null for single-turn samples.
  const std::string* conversation = nullptr;
};

struct RewardResult {
  double score = 0;
  std::vector<std::pair<std::string, double>> parts;  // named sub-scores, reported as metrics
};

using RewardFn = std::function<RewardResult(const RewardInput&)>;

}  // namespace tandem
