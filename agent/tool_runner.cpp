#include "agent/tool_runner.h"

#include <algorithm>

namespace tandem {

using Clock = std::chrono::steady_clock;

ToolRunner::ToolRunner(std::vector<std::shared_ptr<Tool>> tools, int concurrency, std::chrono::milliseconds deadline)
    : tools_(std::move(tools)), deadline_(deadline) {
  TANDEM_CHECK(concurrency > 0, "tool concurrency must be positive, got {}", concurrency);
  TANDEM_CHECK(deadline.count() > 0, "a tool deadline must be positive, got {} ms", deadline.count());
  for (int i = 0; i < concurrency; ++i) threads_.emplace_back([this] { work(); });
}

ToolRunner::~ToolRunner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  work_ready_.notify_all();
  // A call still running ends by its own deadline (the sandbox kills its process).
  for (std::thread& t : threads_) t.join();
}

uint64_t ToolRunner::submit(const std::string& name, const nlohmann::json& arguments) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t ticket = next_ticket_++;
  auto tool = std::find_if(tools_.begin(), tools_.end(), [&](const auto& t) { return t->name() == name; });
  if (tool == tools_.end()) {
    std::string known;
    for (const auto& t : tools_) known += (known.empty() ? "" : ", ") + t->name();
    ToolOutcome outcome{ticket, name, {}, false};
    outcome.result.error = true;
    outcome.result.observation =
        fmt::format("Error: there is no tool named \"{}\"; the tools are: {}", name, known.empty() ? "(none)" : known);
    ready_.push_back(std::move(outcome));
    outcome_ready_.notify_all();
    return ticket;
  }
  queue_.push_back({ticket, *tool, arguments});
  names_[ticket] = name;
  work_ready_.notify_one();
  return ticket;
}

uint64_t ToolRunner::submit(std::shared_ptr<Tool> tool, const nlohmann::json& arguments) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t ticket = next_ticket_++;
  names_[ticket] = tool->name();
  queue_.push_back({ticket, std::move(tool), arguments});
  work_ready_.notify_one();
  return ticket;
}

void ToolRunner::work() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      running_[job.ticket] = Clock::now();
    }
    ToolOutcome outcome{job.ticket, job.tool->name(), {}, false};
    const Clock::time_point start = Clock::now();
    for (int attempt = 0; attempt < 2; ++attempt) {
      try {
        outcome.result = job.tool->call(job.arguments);
        outcome.unavailable = false;
        break;
      } catch (const ToolUnavailable& e) {
        outcome.unavailable = true;
        outcome.result.observation = e.what();
      } catch (const std::exception& e) {  // a tool's own bug: the model reads it as an error
        outcome.result.error = true;
        outcome.result.observation = fmt::format("Error: the tool failed: {}", e.what());
        break;
      }
    }
    outcome.result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::lock_guard<std::mutex> lock(mutex_);
    // Gone from running_: its deadline passed and it was answered already.
    if (running_.erase(job.ticket) == 0) continue;
    names_.erase(job.ticket);
    ready_.push_back(std::move(outcome));
    outcome_ready_.notify_all();
  }
}

void ToolRunner::expire_locked(Clock::time_point now) {
  for (auto it = running_.begin(); it != running_.end();) {
    if (now - it->second < deadline_) {
      ++it;
      continue;
    }
    ToolOutcome outcome{it->first, names_[it->first], {}, false};
    outcome.result.stop = "tool_timeout";
    outcome.result.error = true;
    outcome.result.seconds = std::chrono::duration<double>(now - it->second).count();
    outcome.result.observation =
        fmt::format("Error: the tool did not answer within {} s", std::chrono::duration<double>(deadline_).count());
    names_.erase(it->first);
    it = running_.erase(it);
    ready_.push_back(std::move(outcome));
  }
}

std::vector<ToolOutcome> ToolRunner::take_locked() {
  std::vector<ToolOutcome> out;
  out.swap(ready_);
  return out;
}

std::vector<ToolOutcome> ToolRunner::take_ready() {
  std::lock_guard<std::mutex> lock(mutex_);
  expire_locked(Clock::now());
  return take_locked();
}

std::vector<ToolOutcome> ToolRunner::wait_any(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  const Clock::time_point until = Clock::now() + timeout;
  for (;;) {
    expire_locked(Clock::now());
    if (!ready_.empty()) return take_locked();
    // Wake at the earliest running call's deadline, to answer it as a timeout.
    Clock::time_point wake = until;
    for (const auto& [ticket, started] : running_) wake = std::min(wake, started + deadline_);
    if (Clock::now() >= until) return {};
    outcome_ready_.wait_until(lock, wake);
  }
}

int64_t ToolRunner::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(names_.size() + ready_.size());
}

}  // namespace tandem
