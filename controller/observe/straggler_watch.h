// Per-worker command times of each step, and the stragglers among the workers
// (logging.straggler): a worker whose time for some command is more than `factor` times
// the median of the workers that ran the same command that step is slow that step; slow
// `steps` steps in a row, it is a straggler until a step where it is not slow. A straggler
// must cost time: the seconds it is over the median must also be at least `min_share` of
// the step (taken as the busiest worker's summed command time), so a 2 ms command that
// takes 3 ms on one worker is not reported in a 200 ms step.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tandem {

// worker name -> command name -> seconds (summed over the step's commands of that name).
using WorkerCommandTimes = std::map<std::string, std::map<std::string, double>>;

struct SlowCommand {
  std::string worker;
  std::string command;
  double seconds = 0;
  double median_seconds = 0;  // of the workers that ran it
};

class StragglerWatch {
 public:
  StragglerWatch(double factor, int64_t steps, double min_share);
  // One step's times. Returns the workers that became stragglers with this step, with
  // the command that made them slow (the one furthest over its median).
  std::vector<SlowCommand> observe(const WorkerCommandTimes& times);
  const std::set<std::string>& stragglers() const { return stragglers_; }

 private:
  double factor_;
  int64_t steps_;
  double min_share_;
  std::map<std::string, int64_t> slow_in_a_row_;
  std::set<std::string> stragglers_;
};

// Commands whose median is below this are left out: their times are mostly noise.
inline constexpr double kStragglerMinMedianSeconds = 0.001;

// One line of RUN_DIR/worker_phases.jsonl:
// {"step": N, "time": unix, "workers": {"rollout-0": {"rollout_generate": s, ...}}, "stragglers": [...]}
std::string worker_phases_json(int64_t step, double unix_time, const WorkerCommandTimes& times,
                               const std::set<std::string>& stragglers);

}  // namespace tandem
