#include "controller/run/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace tandem {

ProgressLine::ProgressLine(const std::string& mode, int64_t total_steps, int64_t first_step)
    : mode_(mode), total_(total_steps), first_step_(first_step), terminal_(::isatty(STDERR_FILENO) == 1),
      started_(std::chrono::steady_clock::now()) {}

void ProgressLine::update(int64_t step, const std::string& fields) {
  if (mode_ == "quiet") return;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const int64_t done_here = step - first_step_;
  double eta = done_here > 0 ? elapsed / static_cast<double>(done_here) * static_cast<double>(total_ - step) : 0.0;
  std::string line = fmt::format("[step {}/{}] {} | {:.1f} s elapsed, ETA {:.1f} s", step, total_, fields, elapsed, eta);
  if (mode_ == "progress" && terminal_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    open_line_ = true;
    return;
  }
  int64_t every = mode_ == "plain" ? 1 : std::max<int64_t>(1, total_ / 20);
  if (step % every == 0 || step == total_ || step == 1) std::fprintf(stderr, "%s\n", line.c_str());
}

void ProgressLine::note(const std::string& text) {
  if (mode_ == "quiet") return;
  finish();
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

void ProgressLine::finish() {
  if (open_line_) std::fputc('\n', stderr);
  open_line_ = false;
}

}  // namespace tandem
