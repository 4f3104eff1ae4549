// Scoring samples with the config's rewards, many samples at a time and in parallel:
// C++ rewards (built-ins and plugins) on threads, Python rewards in worker processes
// (rewards/python/pool.h).
//
// A sample a reward cannot score (it threw, returned a non-finite score, timed out, or its
// worker died) is an outcome with an error, never an exception: the caller applies the
// entry's on_error policy to each.
#pragma once

#include "core/config.h"

#include <nlohmann/json.hpp>
#include <tandem/reward.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct RewardOutcome {
  RewardResult result;
  std::string error;  // empty: scored
};

class RewardScorer {
 public:
  virtual ~RewardScorer() = default;
  // One outcome per input, in order.
  virtual std::vector<RewardOutcome> score(const std::vector<RewardInput>& inputs) = 0;
  // Python rewards: where the workers' output (the user's print()s, tracebacks) goes.
  virtual void set_log_path(const std::string& path) {}
  // Reward-model workers: launched (their logs in RUN_DIR/logs) and loaded while the run
  // starts; returns at once, and score() waits until they are ready.
  virtual void start(const std::string& run_dir) {}
  // Workers killed for running past timeout_s, since the start (python rewards).
  virtual int64_t timeouts() const { return 0; }
};

// `fn` over the inputs on `threads` threads (0: this host's cores, at most 8).
std::unique_ptr<RewardScorer> make_native_scorer(RewardFn fn, int64_t threads);

// The scorer for config entry `index`: python (its workers started, the file imported and
// the function found: errors say so with Python's traceback) or a C++ reward by name
// (plugins must be loaded first).
// `python_path`: the config's python.path.
std::unique_ptr<RewardScorer> make_reward_scorer(const RewardConfig& config, size_t index,
                                                 const std::vector<std::string>& python_path = {});

// Threads or processes for `requested` (0: this host's cores, at most 8).
int64_t reward_parallelism(int64_t requested);

// What Python and HTTP rewards receive for a sample, verl's compute_score arguments:
//   data_source   the row's `data_source` field ("" when it has none)
//   solution_str  the decoded response (without the prompt and the end-of-sequence token)
//   ground_truth  the row's `answer` (data.answer_key's value; null when absent)
//   extra_info    the row's `extra_info` field, as an object or array when it holds one,
//                 else its text (null when absent)
nlohmann::json reward_arguments(const RewardInput& input);

// A score as a Python function or a server returns it: a number, or an object with a
// numeric "score" whose other numeric (and boolean) entries become parts. Anything else
// is an outcome with an error saying what came back.
RewardOutcome outcome_from_score_value(const nlohmann::json& value);

}  // namespace tandem
