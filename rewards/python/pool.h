// A Python reward (`reward: [{python: FILE.py, function: compute_score}]`) run by a pool
// of worker processes, each an embedded CPython (`tandem reward-worker`, protocol in
// rewards/python/worker.h).
//
// score() spreads the samples over the workers in small chunks, so a slow sample does
// not hold the others back, and reads each result as soon as its call returns. Every
// call has `timeout_s`: a worker past it is killed (SIGKILL) and replaced, the sample it
// was scoring gets a timeout error, and the rest of its chunk goes to the queue again. A
// worker that dies (a crash in a C extension, os._exit) is replaced the same way. A
// Python exception is the sample's error, with the traceback.
//
// Containment (untrusted code): each worker leads its own process group, killed whole
// when the worker is replaced or the pool ends, so what a reward forks never outlives it;
// RLIMIT_DATA bounds its memory (reward.memory_mb) and a group holding more than
// reward.max_processes processes is killed; requests arrive on a descriptor of their own
// (stdin is /dev/null to user code) and replies leave on another (print() goes to the
// log); the worker's exit is seen through its pidfd even when a forked child keeps the
// pipe open. Its output goes to RUN_DIR/logs/reward-*.log (before the run directory
// exists, to a temporary file later appended there). An interrupt (Ctrl-C, SIGTERM) ends
// score() at once; with on_error: fail, score() returns at the first error.
//
// The function's arguments are reward_arguments() (reward_scoring.h), null as None.
#pragma once

#include "rewards/scoring.h"
#include "core/process.h"

#include <chrono>
#include <deque>
#include <string>
#include <vector>

namespace tandem {

class PythonRewardPool : public RewardScorer {
 public:
  // Starts the workers and waits until each has imported the file. An import error, a
  // missing function or a worker that does not start within the time allowed is an
  // Error naming reward.INDEX, the file and Python's message. `tandem_binary`: the
  // program that runs `reward-worker` (empty: this process's executable).
  // `search_path`: the config's python.path, put on the workers' sys.path.
  PythonRewardPool(const RewardConfig& config, size_t index, const std::string& tandem_binary = "",
                   std::vector<std::string> search_path = {});
  ~PythonRewardPool() override;

  std::vector<RewardOutcome> score(const std::vector<RewardInput>& inputs) override;
  void set_log_path(const std::string& path) override;
  int64_t timeouts() const override { return timeouts_; }
  size_t workers() const { return workers_.size(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Worker {
    ChildProcess process;
    int to_child = -1;
    int from_child = -1;
    std::string received;           // bytes read, not yet a whole line
    bool ready = false;
    std::vector<size_t> calls;      // the calls sent and not answered, in order
    size_t answered = 0;            // how many of `calls` have been answered
    Clock::time_point deadline;     // for the call being scored
  };

  void start_worker(size_t slot);
  // Replaces every worker that is not ready or still holds calls of an earlier score().
  void restart_unfinished_workers();
  void stop_worker(Worker& worker);
  // SIGKILLs the slot's worker and starts a fresh one (not yet ready: wait_until_ready()).
  void kill_and_start(size_t slot);
  void wait_until_ready();
  // Replaces worker `slot` after it died or timed out: its unanswered calls after the one
  // it was scoring go back to `queue`; that one gets `error`.
  void replace(size_t slot, const std::string& error, std::deque<size_t>& queue,
               std::vector<RewardOutcome>& outcomes, std::vector<bool>& done);
  // Reads what the worker sent; false when its output closed.
  bool read_lines(Worker& worker, std::vector<std::string>& lines);
  std::string what() const;  // "reward.N (FILE:FUNCTION)"

  RewardConfig config_;
  size_t index_;
  std::string binary_;
  std::vector<std::string> search_path_;
  std::string log_path_;
  std::string pending_output_;  // the temporary file the workers write to until set_log_path
  std::vector<Worker> workers_;
  std::vector<std::string> requests_;  // the calls of the current score(), as JSON text
  int64_t timeouts_ = 0;
};

}  // namespace tandem
