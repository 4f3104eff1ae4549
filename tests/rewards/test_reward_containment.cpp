// Python reward code contained (rewards/python/pool.h, issue 29): a memory bound, what it
// forks killed with it, its exit seen although a child holds its pipe, stdin that cannot
// swallow requests, a process-count bound, output kept off the console, on_error: fail
// failing at the first error, and an interrupt ending score() at once. Its own binary:
// the last case leaves this process's interrupt flag set.
#include "rewards/python/pool.h"
#include "core/error.h"
#include "core/files.h"
#include "core/process.h"
#include "core/signals.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace tandem;

namespace {

const std::string kHostile = std::string(TANDEM_SOURCE_DIR) + "/tests/python/hostile_rewards.py";

RewardConfig hostile(const std::string& function, int64_t workers = 1) {
  RewardConfig c;
  c.python = kHostile;
  c.function = function;
  c.name = function;
  c.workers = workers;
  c.needs_ground_truth = false;
  c.on_error = "fallback";  // every sample scored: each case reads each outcome
  return c;
}

std::vector<RewardInput> inputs_of(const std::vector<std::string>& responses) {
  static const std::vector<int32_t> ids = {1, 2};
  static const std::map<std::string, std::string> row;
  std::vector<RewardInput> inputs;
  for (const std::string& r : responses) inputs.push_back({"prompt", r, ids, row});
  return inputs;
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

TEST_CASE("memory_mb bounds what a reward may allocate: past it the sample fails with MemoryError") {
  RewardConfig config = hostile("allocates");
  config.memory_mb = 1024;
  PythonRewardPool pool(config, 0, TANDEM_BINARY);
  const std::vector<RewardOutcome> outcomes = pool.score(inputs_of({"16", "4096", "16"}));
  CHECK(outcomes[0].error.empty());
  CHECK(outcomes[0].result.score == 1.0);
  CHECK_MESSAGE(outcomes[1].error.find("MemoryError") != std::string::npos, outcomes[1].error);
  CHECK(outcomes[2].result.score == 1.0);  // the same worker goes on
}

TEST_CASE("processes a reward forks are killed with its worker: none outlives the pool") {
  TempDir dir;
  const std::string pid_file = dir.path() + "/pids";
  RewardConfig config = hostile("forks_and_returns", 2);
  config.reward_kwargs = nlohmann::json{{"pid_file", pid_file}}.dump();
  std::vector<int> pids;
  {
    PythonRewardPool pool(config, 0, TANDEM_BINARY);
    for (const RewardOutcome& o : pool.score(inputs_of({"a", "b", "c", "d"}))) CHECK(o.result.score == 1.0);
    std::istringstream in(read_file(pid_file).value_or(""));
    for (int pid = 0; in >> pid;) pids.push_back(pid);
    REQUIRE(pids.size() == 4);
    for (int pid : pids) CHECK(process_alive(pid));  // the grandchildren run while the pool does
  }
  const Clock::time_point start = Clock::now();
  bool any = true;
  while (any && seconds_since(start) < 10) {
    any = false;
    for (int pid : pids) any = any || process_alive(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK_FALSE(any);
}

TEST_CASE("a worker that dies while a child it forked holds its pipe is seen dead at once, not at the timeout") {
  RewardConfig config = hostile("forks_then_dies");
  config.timeout_s = 60;
  PythonRewardPool pool(config, 0, TANDEM_BINARY);
  const std::vector<RewardOutcome> outcomes = pool.score(inputs_of({"a", "die", "b"}));
  CHECK(outcomes[0].result.score == 1.0);
  CHECK_MESSAGE(outcomes[1].error.find("exited with status 3") != std::string::npos, outcomes[1].error);
  CHECK(outcomes[2].result.score == 1.0);
  CHECK(pool.timeouts() == 0);
}

TEST_CASE("a reward that reads stdin reads nothing: the request channel is not its stdin") {
  PythonRewardPool pool(hostile("reads_stdin"), 0, TANDEM_BINARY);
  const std::vector<RewardOutcome> outcomes = pool.score(inputs_of({"a", "b", "c"}));
  for (const RewardOutcome& o : outcomes) {
    CHECK_MESSAGE(o.error.empty(), o.error);
    CHECK(o.result.score == 0.0);
  }
}

TEST_CASE("a worker's process group holding more than max_processes is killed; the sample says why") {
  RewardConfig config = hostile("spawns_many");
  config.max_processes = 4;
  PythonRewardPool pool(config, 2, TANDEM_BINARY);
  const std::vector<RewardOutcome> outcomes = pool.score(inputs_of({"2", "8"}));
  CHECK(outcomes[0].result.score == 2.0);  // the worker and 2 children: within 4
  CHECK_MESSAGE(outcomes[1].error.find("started more than 4 processes (reward.2.max_processes)") != std::string::npos,
                outcomes[1].error);
}

TEST_CASE("what a reward prints, even while importing, goes to its log") {
  TempDir dir;
  PythonRewardPool pool(hostile("reads_stdin"), 0, TANDEM_BINARY);
  pool.set_log_path(dir.path() + "/reward.log");
  CHECK(read_file(dir.path() + "/reward.log").value_or("").find("printed while importing") != std::string::npos);
}

TEST_CASE("on_error: fail returns at the first error instead of scoring the rest of the step") {
  RewardConfig config = hostile("boom_then_slow");
  config.on_error = "fail";
  PythonRewardPool pool(config, 0, TANDEM_BINARY);
  std::vector<std::string> responses = {"x", "boom"};
  for (int i = 0; i < 20; ++i) responses.push_back("slow");  // 10 s more if scored
  const std::vector<RewardOutcome> outcomes = pool.score(inputs_of(responses));
  CHECK(outcomes[0].result.score == 2.0);
  CHECK(outcomes[1].error.find("ValueError: boom") != std::string::npos);
  size_t scored_after = 0;
  for (size_t i = 2; i < outcomes.size(); ++i) scored_after += outcomes[i].result.score == 2.0 ? 1 : 0;
  CHECK(scored_after < 20);
  // The pool is usable again: the busy worker is replaced at the next score().
  CHECK(pool.score(inputs_of({"y"})).at(0).result.score == 2.0);
}

// Last: it leaves this process's interrupt flag set.
TEST_CASE("Ctrl-C ends a reward call in progress at once") {
  RewardConfig config = hostile("sleeps");
  config.timeout_s = 120;
  PythonRewardPool pool(config, 0, TANDEM_BINARY);
  install_interrupt_handlers();
  std::thread interrupter([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::kill(::getpid(), SIGINT);
  });
  const Clock::time_point start = Clock::now();
  CHECK_THROWS_WITH_AS(pool.score(inputs_of({"a"})), doctest::Contains("interrupted by SIGINT"), Error);
  interrupter.join();
  // A call of 60 s, interrupted after 0.5: anything near 60 s means the interrupt waited for it.
  CHECK(seconds_since(start) < 30);
}
