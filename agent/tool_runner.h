// Runs tool calls off the engine's thread, many at once (issue 28, item 5): a sample
// waiting for its tool does not hold up the batch, and no sample waits for another's
// tool. Each call gets a deadline; one still running past it is answered as a timeout
// (the tool's own machinery, e.g. the sandbox, kills its process) and its late result is
// dropped. A ToolUnavailable (the machinery failed) is retried once, then reported as
// such, apart from a failed call the model reads.
#pragma once

#include "agent/tool.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem {

struct ToolOutcome {
  uint64_t ticket = 0;
  std::string tool;
  ToolResult result;
  bool unavailable = false;  // the machinery failed twice: result.observation says how
};

class ToolRunner {
 public:
  // `concurrency` calls run at once (threads); `deadline` bounds each from its start.
  ToolRunner(std::vector<std::shared_ptr<Tool>> tools, int concurrency, std::chrono::milliseconds deadline);
  ~ToolRunner();
  ToolRunner(const ToolRunner&) = delete;
  ToolRunner& operator=(const ToolRunner&) = delete;

  // Queues a call; its outcome comes back from wait_any()/take_ready() with this ticket.
  // A name no tool has is answered at once as an error the model reads.
  uint64_t submit(const std::string& name, const nlohmann::json& arguments);
  // Queues a call of a tool not among the model's (an environment's step).
  uint64_t submit(std::shared_ptr<Tool> tool, const nlohmann::json& arguments);
  // Outcomes finished so far (deadline passes included), without waiting.
  std::vector<ToolOutcome> take_ready();
  // Waits until an outcome is ready or `timeout` passes.
  std::vector<ToolOutcome> wait_any(std::chrono::milliseconds timeout);
  int64_t in_flight() const;

 private:
  struct Job {
    uint64_t ticket;
    std::shared_ptr<Tool> tool;
    nlohmann::json arguments;
  };
  void work();
  void expire_locked(std::chrono::steady_clock::time_point now);
  std::vector<ToolOutcome> take_locked();

  std::vector<std::shared_ptr<Tool>> tools_;
  std::chrono::milliseconds deadline_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_, outcome_ready_;
  std::deque<Job> queue_;
  std::map<uint64_t, std::chrono::steady_clock::time_point> running_;  // ticket -> started
  std::map<uint64_t, std::string> names_;                               // queued or running
  std::vector<ToolOutcome> ready_;
  uint64_t next_ticket_ = 1;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tandem
