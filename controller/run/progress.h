// The console view of a run. `progress`: one live line on a terminal (a line every
// 5% of the run when stderr is a file); `plain`: a line per step; `quiet`: nothing.
#pragma once

#include <chrono>
#include <string>

namespace tandem {

class ProgressLine {
 public:
  // `first_step`: the steps already done when this line starts (a resumed run); the ETA
  // is the pace of the steps since then.
  ProgressLine(const std::string& mode, int64_t total_steps, int64_t first_step = 0);
  // `fields`: the step's figures, e.g. "reward 0.41 | kl 0.002".
  ~ProgressLine() { finish(); }  // a run that fails mid-line: its error starts on a line of its own
  void update(int64_t step, const std::string& fields);
  // A line that stays (an evaluation's result), printed below the live line in every
  // mode but quiet.
  void note(const std::string& text);
  void finish();

 private:
  std::string mode_;
  int64_t total_;
  int64_t first_step_;
  bool terminal_;
  bool open_line_ = false;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace tandem
