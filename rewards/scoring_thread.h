// The run's scoring thread. All scoring happens on it, so that the controller's main
// thread keeps its control plane alive (heartbeats: a worker that hears none for
// controller_timeout_s exits) while a slow reward works. And samples can be scored while
// the rest of the batch is still generating: rollout workers send the samples that
// finished as progress (rollout_generate with "stream"), and this scores them at once,
// so that reward time hides under generation time instead of following it.
//
// The scores are only an early copy: once generation is done, the training loop takes
// each final sample's scores from here when a sample with the same prompt, index and
// tokens was scored (a restarted rollout worker may redo a sample), and scores the rest
// itself. Between begin() and finish() the scorers are this object's thread's; after
// finish() returns they are the caller's again.
//
// One ScoringThread (and one thread) lives for the whole run: reward worker processes it
// starts (a Python worker replaced after a timeout) die with the thread that started
// them (PR_SET_PDEATHSIG), so that thread must not end while they are in use.
#pragma once

#include "rewards/scoring.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tandem {

// A sample as scoring needs it.
struct ScoredSample {
  size_t prompt_slot = 0;
  int64_t sample_index = 0;
  std::vector<int32_t> tokens;
  std::string text;                    // decoded, end-of-sequence left out (multi-turn: the last assistant message)
  std::vector<RewardOutcome> outcomes;  // [reward entry]
  std::string conversation;            // multi-turn: RewardInput::conversation's JSON; else empty
};

class ScoringThread {
 public:
  explicit ScoringThread(std::vector<std::unique_ptr<RewardScorer>>& rewards);
  ~ScoringThread();
  ScoringThread(const ScoringThread&) = delete;
  ScoringThread& operator=(const ScoringThread&) = delete;

  // A new batch: `prompts[slot]` and `rows[slot]` are the prompt text and dataset row of
  // its slots (they must outlive finish()). Clears the busy time.
  void begin(std::vector<const std::string*> prompts, std::vector<const std::map<std::string, std::string>*> rows);
  // Queues samples (outcomes empty) for scoring; returns at once.
  void submit(std::vector<ScoredSample> samples);
  // Whether everything submitted is scored, waiting at most `seconds` for it.
  bool wait_idle_for(double seconds);
  // Waits until everything submitted is scored; returns the samples by (slot, index).
  // A scorer that threw (not a sample's error: the scorer itself, e.g. a Python worker
  // that cannot be restarted) is rethrown here.
  std::map<std::pair<size_t, int64_t>, ScoredSample> finish();
  // Seconds the thread spent scoring since begin().
  double busy_seconds() const { return busy_seconds_; }

 private:
  void run();

  std::vector<std::unique_ptr<RewardScorer>>& rewards_;
  std::vector<const std::string*> prompts_;
  std::vector<const std::map<std::string, std::string>*> rows_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::vector<ScoredSample>> queue_;
  bool stopping_ = false;
  bool busy_ = false;
  std::condition_variable idle_;
  std::map<std::pair<size_t, int64_t>, ScoredSample> done_;
  double busy_seconds_ = 0;
  std::exception_ptr error_;  // a scorer's exception, for finish()
  std::thread thread_;
};

}  // namespace tandem
