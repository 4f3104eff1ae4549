// Scoring a step's (or an evaluation's) samples with the run's rewards, on the run's
// scoring thread (rewards/scoring_thread.h): C++, Python and HTTP rewards alike, each
// entry's on_error policy applied to the samples a reward could not score, one console
// line per reward and step for those, every full error in RUN_DIR/logs/reward_errors.log,
// and the per-step count of reward calls killed for running past timeout_s.
//
// The step loop owns one StepScoring for the run. While the scoring thread works, the
// loop's thread keeps the control plane alive through `keep_alive` (heartbeats: a worker
// that hears none for controller_timeout_s exits).
#pragma once

#include "actor/tokenizer.h"
#include "controller/data/dataset.h"
#include "controller/loop/sample.h"
#include "core/config.h"
#include "rewards/scoring_thread.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tandem::training {

// Scores by (prompt slot, sample index): the samples scored while the rest generated.
using EarlyScores = std::map<std::pair<size_t, int64_t>, ScoredSample>;

class StepScoring {
 public:
  // rewards[r] scores config.reward[r]; `eos_token_ids` are left out of the decoded text.
  StepScoring(std::vector<std::unique_ptr<RewardScorer>> rewards, const Config& config, std::string run_dir,
              std::shared_ptr<const Tokenizer> tokenizer, std::vector<int64_t> eos_token_ids,
              std::function<void()> keep_alive);
  ~StepScoring();

  // Python rewards log into RUN_DIR/logs/reward-<index>-<name>.log; reward-model workers
  // start (RewardScorer::start).
  void open_reward_logs();

  // Scoring while generating: begin_early starts a batch whose slots are
  // data.rows[rows[slot]], score_early queues finished samples, finish_early waits for
  // them (keeping the control plane alive) and returns their scores.
  void begin_early(const std::vector<size_t>& rows, const Dataset& data);
  void score_early(const std::vector<Sample>& finished);
  EarlyScores finish_early();
  // After a failed generation: waits until nothing of the batch is being scored.
  void drain_early();
  // The scoring thread's working time in the latest batch.
  double busy_seconds() const;

  // Scores samples of data.rows[rows[prompt_slot]] (sets text, reward, reward_results):
  // those in `early` (same tokens) keep those scores, the rest are scored now. Returns
  // how many scores were fallback scores (reward on_error: fallback); throws for a failed
  // sample of a reward whose on_error is not fallback.
  int64_t score(std::vector<Sample>& samples, const std::vector<size_t>& rows, const Dataset& data,
                EarlyScores* early = nullptr);

  // Reward calls killed for running past timeout_s since the last call (a per-step count).
  int64_t new_timeouts();

 private:
  std::string decode_response(const std::vector<int32_t>& tokens) const;
  // Appends every failed sample's full error to RUN_DIR/logs/reward_errors.log; returns that path.
  std::string record_errors(const std::string& reward, const std::vector<std::string>& problems);

  std::vector<std::unique_ptr<RewardScorer>> rewards_;
  std::vector<RewardConfig> configs_;
  std::string run_dir_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<int64_t> eos_token_ids_;
  std::function<void()> keep_alive_;
  // Made at the first batch; lives for the run (reward workers die with the thread that
  // started them). Declared after rewards_: destroyed first, while the scorers it uses exist.
  std::unique_ptr<ScoringThread> thread_;
  int64_t timeouts_counted_ = 0;  // new_timeouts(): the total at its last call
};

}  // namespace tandem::training
