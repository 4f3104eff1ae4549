// Runs that stop and go on: `tandem resume` after an interruption (with a damaged newest
// checkpoint), a rollout worker and a learner killed with SIGKILL mid-run. Each must end
// with the metrics of an uninterrupted run of the same config, timings aside: same
// seeds, same samples, none lost or counted twice.
#include "core/process.h"
#include "run_tandem.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

// Small enough for seconds per run; a warm-up so that rewards and gradients are not all zero.
const char* kConfig = R"(experiment: {name: recovery, seed: 3, steps: 12, checkpoint_every: 3, keep_checkpoints: 2}
model: {path: "builtin:tiny"}
data: {train: "builtin:addition1", batch_size: 8}
sft: {steps: 40, batch_size: 32}
algorithm: {group_size: 4, kl: {coef: 0.01}}
rollout: {workers: 2, max_new_tokens: 3, kv_cache_mb: 8}
learner: {workers: 1, micro_batch_size: 32, threads: 1, optimizer: {lr: 1.0e-3}}
placement: disaggregated
launcher: {max_restarts: 2}
logging: {console: plain}
)";

std::vector<nlohmann::json> metric_rows(const std::string& run_dir) {
  return read_json_lines(run_dir + "/metrics.jsonl");
}

// Every metric but timings and the restart count equal, step by step.
void check_same_metrics(const std::string& expected_run, const std::string& run) {
  const auto expected = metric_rows(expected_run), got = metric_rows(run);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].at("step").get<int>() == static_cast<int>(i) + 1);
    for (const auto& [key, value] : expected[i].items()) {
      if (key.rfind("time/", 0) == 0 || key.rfind("perf/", 0) == 0) continue;
      INFO("step ", i + 1, " ", key);
      REQUIRE(got[i].contains(key));
      CHECK(got[i].at(key) == value);
    }
  }
}

std::string write_config(const TempDir& dir) {
  const std::string path = dir.path() + "/config.yaml";
  std::ofstream(path) << kConfig;
  return path;
}

// The uninterrupted run every scenario is compared with.
const std::string& reference_run() {
  static TempDir dir;
  static const std::string run = [&] {
    const std::string out = dir.path() + "/out.txt";
    const ExitStatus status = run_tandem({"run", write_config(dir), "--run-dir", dir.path() + "/run"}, out, 120);
    INFO(read_text(out));
    REQUIRE(status.exit_code == 0);
    return dir.path() + "/run";
  }();
  return run;
}

// Starts `tandem run` and waits until metrics.jsonl has `step`.
ChildProcess start_run_until_step(const TempDir& dir, int step) {
  ChildProcess controller = ChildProcess::spawn(
      {TANDEM_BINARY, "run", write_config(dir), "--run-dir", dir.path() + "/run"}, {dir.path() + "/out.txt", false});
  const std::string needle = "{\"step\":" + std::to_string(step) + ",";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_text(dir.path() + "/run/metrics.jsonl").find(needle) == std::string::npos) {
    REQUIRE_MESSAGE(controller.running(), read_text(dir.path() + "/out.txt"));
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, read_text(dir.path() + "/out.txt"));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return controller;
}

// The pid of the controller's worker `tandem worker --role ROLE --rank RANK` (from /proc), or 0.
int find_worker_pid(int controller, const std::string& role, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_text(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    const std::string stat = read_text(entry.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == controller && cmdline.find(" worker --role " + role + " --rank " + std::to_string(rank) + " ") !=
                                  std::string::npos) {
      return std::stoi(name);
    }
  }
  return 0;
}

int worker_pid(int controller, const std::string& role, int rank) {
  const int pid = find_worker_pid(controller, role, rank);
  REQUIRE_MESSAGE(pid != 0, "no ", role, " worker of rank ", rank, " under pid ", controller);
  return pid;
}

}  // namespace

TEST_CASE("an interrupted run resumes exactly; a damaged newest checkpoint is set aside for the one before") {
  const std::string expected = reference_run();
  TempDir dir;
  ChildProcess controller = start_run_until_step(dir, 7);
  controller.send_signal(SIGTERM);
  const auto status = controller.wait_for(30);
  REQUIRE(status.has_value());
  CHECK(status->exit_code == 143);
  const std::string run = dir.path() + "/run";
  CHECK(read_text(dir.path() + "/out.txt").find("tandem resume " + run) != std::string::npos);

  // Damage one byte of the newest checkpoint's weights: its checksum no longer matches.
  int newest = 0;
  for (const auto& entry : fs::directory_iterator(run + "/checkpoints")) {
    const std::string name = entry.path().filename();
    if (name.rfind("step_", 0) == 0) newest = std::max(newest, std::stoi(name.substr(5)));
  }
  REQUIRE(newest >= 6);
  const std::string damaged = run + "/checkpoints/step_" + std::to_string(newest);
  {
    std::fstream f(damaged + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    f.put('X');
  }
  const std::string out = dir.path() + "/resume.txt";
  const ExitStatus resumed = run_tandem({"resume", run}, out, 120);
  INFO(read_text(out));
  REQUIRE(resumed.exit_code == 0);
  CHECK(read_text(out).find("step_" + std::to_string(newest) + " is not usable") != std::string::npos);
  CHECK(read_text(out).find("resuming after step " + std::to_string(newest - 3)) != std::string::npos);
  CHECK(fs::exists(damaged + ".unusable/model.safetensors"));  // set aside, not deleted
  check_same_metrics(expected, run);
  CHECK(fs::exists(run + "/policy/model.safetensors"));
}

TEST_CASE("resume with no usable checkpoint starts over; a directory that is not a run is exit 2") {
  const std::string expected = reference_run();
  TempDir dir;
  ChildProcess controller = start_run_until_step(dir, 2);
  controller.send_signal(SIGTERM);
  REQUIRE(controller.wait_for(30).has_value());
  const std::string run = dir.path() + "/run";
  const ExitStatus resumed = run_tandem({"resume", run}, dir.path() + "/resume.txt", 120);
  INFO(read_text(dir.path() + "/resume.txt"));
  REQUIRE(resumed.exit_code == 0);
  check_same_metrics(expected, run);
  CHECK(run_tandem({"resume", dir.path() + "/not-a-run"}, dir.path() + "/bad.txt").exit_code == 2);
  CHECK(read_text(dir.path() + "/bad.txt").find("is not a run directory") != std::string::npos);
}

TEST_CASE("a rollout worker killed with SIGKILL mid-run is restarted and its requests redone") {
  const std::string expected = reference_run();
  TempDir dir;
  ChildProcess controller = start_run_until_step(dir, 4);
  REQUIRE(::kill(worker_pid(controller.pid(), "rollout", 1), SIGKILL) == 0);
  const auto status = controller.wait_for(60);
  REQUIRE(status.has_value());
  const std::string out = read_text(dir.path() + "/out.txt");
  INFO(out);
  REQUIRE(status->exit_code == 0);
  CHECK(out.find("restarted worker rollout-1") != std::string::npos);
  check_same_metrics(expected, dir.path() + "/run");
  const auto rows = metric_rows(dir.path() + "/run");
  CHECK(rows.back().at("perf/worker_restarts").get<double>() == 1.0);
  for (const auto& row : rows) CHECK(row.at("response/count").get<double>() == 8 * 4);  // none lost or doubled
}

TEST_CASE("a learner killed with SIGKILL mid-run restarts from the last checkpoint; with no restarts left, exit 1") {
  const std::string expected = reference_run();
  {
    TempDir dir;
    ChildProcess controller = start_run_until_step(dir, 5);
    REQUIRE(::kill(worker_pid(controller.pid(), "learner", 0), SIGKILL) == 0);
    const auto status = controller.wait_for(60);
    REQUIRE(status.has_value());
    const std::string out = read_text(dir.path() + "/out.txt");
    INFO(out);
    REQUIRE(status->exit_code == 0);
    CHECK(out.find("restarting the learners from the last checkpoint") != std::string::npos);
    check_same_metrics(expected, dir.path() + "/run");
  }
  {
    TempDir dir;
    ChildProcess controller = start_run_until_step(dir, 2);
    // Kill it three times, each time the process the controller started anew: two
    // restarts are allowed (launcher.max_restarts: 2), the third loss ends the run.
    std::vector<int> killed;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (killed.size() < 3 && controller.running() && std::chrono::steady_clock::now() < deadline) {
      const int pid = find_worker_pid(controller.pid(), "learner", 0);
      if (pid != 0 && std::find(killed.begin(), killed.end(), pid) == killed.end()) {
        ::kill(pid, SIGKILL);
        killed.push_back(pid);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK(killed.size() == 3);
    const auto status = controller.wait_for(60);
    REQUIRE(status.has_value());
    const std::string out = read_text(dir.path() + "/out.txt");
    INFO(out);
    CHECK(status->exit_code == 1);
    CHECK(out.find("used all 2 restarts (launcher.max_restarts)") != std::string::npos);
  }
}
