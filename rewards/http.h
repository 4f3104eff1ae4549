// A reward computed by a server (`reward: [{http: URL, name, workers, batch_size,
// timeout_s, retries}]`): a sandboxed code runner, a judge model, a team's scoring service.
//
// The samples of a step go out in batches, `workers` requests at a time, each a JSON POST:
//   {"samples": [{"data_source", "solution_str", "ground_truth", "extra_info", "prompt"}, ...]}
// (reward_arguments() plus the prompt text), answered with 200 and either
//   {"scores": [S, ...]}  or  [S, ...]
// one per sample, in order, each S a number or {"score": number, NAME: number, ...}
// (the other numbers are parts, reported as reward/<name>/<part>).
//
// A request that cannot connect, takes longer than timeout_s, or is answered 429 or 5xx
// is tried again, up to `retries` times, after 0.5 s, 1 s, 2 s, ... Then, or at once for
// any other status or an unreadable answer, every sample of the batch gets an error
// naming the URL and what happened (the entry's on_error decides their scores).
#pragma once

#include "rewards/scoring.h"

#include <string>

namespace tandem {

class HttpReward : public RewardScorer {
 public:
  HttpReward(const RewardConfig& config, size_t index);
  std::vector<RewardOutcome> score(const std::vector<RewardInput>& inputs) override;
  // The health check `validate` and `run` make before anything starts: one POST of an
  // empty batch ({"samples": []}) with a short timeout (timeout_s, at most 5 s). No answer
  // (refused, unreachable, timed out) or 404/405 (a wrong path) is an Error naming the URL;
  // any other answer means a server is there.
  void check_answers() const;

 private:
  // The batch's outcomes after up to 1 + retries attempts.
  std::vector<RewardOutcome> score_batch(const std::vector<RewardInput>& inputs, size_t begin, size_t end) const;

  RewardConfig config_;
  size_t index_;
};

}  // namespace tandem
