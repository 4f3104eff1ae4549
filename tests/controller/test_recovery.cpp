// Runs that stop and go on: `tandem resume` after an interruption (with a damaged newest
// checkpoint), a rollout worker and a learner killed with SIGKILL mid-run. Each must end
// with the metrics of an uninterrupted run of the same config, timings aside: same
// seeds, same samples, none lost or counted twice.
#include "core/process.h"
#include "tests/support/run_tandem.h"

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

// `tandem run` of kConfig in dir/run, `settings` ("key=value") on top.
std::vector<std::string> run_args(const TempDir& dir, const std::vector<std::string>& settings) {
  std::vector<std::string> args = {"run", write_config(dir), "--run-dir", dir.path() + "/run"};
  for (const std::string& setting : settings) args.insert(args.end(), {"--set", setting});
  return args;
}

// A whole run, uninterrupted; returns its run directory.
std::string finished_run(const TempDir& dir, const std::vector<std::string>& settings = {}) {
  const std::string out = dir.path() + "/out.txt";
  const ExitStatus status = run_tandem(run_args(dir, settings), out, 120);
  INFO(read_text(out));
  REQUIRE(status.exit_code == 0);
  return dir.path() + "/run";
}

// The uninterrupted run every scenario is compared with.
const std::string& reference_run() {
  static TempDir dir;
  static const std::string run = finished_run(dir);
  return run;
}

// Waits until the run's metrics.jsonl has `step`.
void wait_for_step(const ChildProcess& controller, const TempDir& dir, int step) {
  const std::string needle = "{\"step\":" + std::to_string(step) + ",";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_text(dir.path() + "/run/metrics.jsonl").find(needle) == std::string::npos) {
    REQUIRE_MESSAGE(controller.running(), read_text(dir.path() + "/out.txt"));
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, read_text(dir.path() + "/out.txt"));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Starts `tandem run` and waits until metrics.jsonl has `step`.
ChildProcess start_run_until_step(const TempDir& dir, int step, const std::vector<std::string>& settings = {}) {
  std::vector<std::string> command = run_args(dir, settings);
  command.insert(command.begin(), TANDEM_BINARY);
  ChildProcess controller = ChildProcess::spawn(command, {dir.path() + "/out.txt", false});
  wait_for_step(controller, dir, step);
  return controller;
}

int worker_pid(int controller, const std::string& role, int rank) {
  const int pid = find_worker_pid(controller, role, rank);
  REQUIRE_MESSAGE(pid != 0, "no ", role, " worker of rank ", rank, " under pid ", controller);
  return pid;
}

// Waits (60 s at most) for the controller to end with `exit_code`; returns what it printed.
std::string output_at_exit(ChildProcess& controller, const TempDir& dir, int exit_code) {
  const auto status = controller.wait_for(60);
  const std::string out = read_text(dir.path() + "/out.txt");
  REQUIRE_MESSAGE(status.has_value(), out);
  REQUIRE_MESSAGE(status->exit_code == exit_code, out);
  return out;
}

// Every step of the run counted all its responses (none lost or doubled), and the run
// restarted `restarts` workers.
void check_every_response_once(const std::string& run, double restarts) {
  const auto rows = metric_rows(run);
  CHECK(rows.back().at("perf/worker_restarts").get<double>() == restarts);
  for (const auto& row : rows) CHECK(row.at("response/count").get<double>() == 8 * 4);
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
  const std::string out = output_at_exit(controller, dir, 0);
  INFO(out);
  CHECK(out.find("restarted worker rollout-1") != std::string::npos);
  check_same_metrics(expected, dir.path() + "/run");
  check_every_response_once(dir.path() + "/run", 1);
}

// This controller's learner snapshot directories (learner.snapshot_dir /dev/shm).
std::vector<std::string> snapshot_dirs_of(int controller) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename();
    const std::string suffix = "-" + std::to_string(controller);
    if (name.rfind("tandem-learner-", 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      found.push_back(entry.path());
    }
  }
  return found;
}

TEST_CASE("a learner killed with SIGKILL mid-run goes back to its snapshot in memory (snapshots off: to the last "
          "checkpoint); with no restarts left, exit 1") {
  const std::string expected = reference_run();
  {
    TempDir dir;
    ChildProcess controller = start_run_until_step(dir, 5);
    CHECK(snapshot_dirs_of(controller.pid()).size() == 1);
    REQUIRE(::kill(worker_pid(controller.pid(), "learner", 0), SIGKILL) == 0);
    const int pid = controller.pid();
    const std::string out = output_at_exit(controller, dir, 0);
    INFO(out);
    CHECK(out.find("restarting the learners") != std::string::npos);
    // Step 5's snapshot, or step 4's when the kill landed while step 5's was being written.
    CHECK(out.find("from their snapshot in memory") != std::string::npos);
    check_same_metrics(expected, dir.path() + "/run");
    CHECK(snapshot_dirs_of(pid).empty());  // removed when the run ended
  }
  {
    TempDir dir;
    ChildProcess controller = start_run_until_step(dir, 5, {"learner.snapshot=off"});
    CHECK(snapshot_dirs_of(controller.pid()).empty());
    REQUIRE(::kill(worker_pid(controller.pid(), "learner", 0), SIGKILL) == 0);
    const std::string out = output_at_exit(controller, dir, 0);
    INFO(out);
    CHECK(out.find("the learners go back to the step 3 checkpoint") != std::string::npos);
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
    const std::string out = output_at_exit(controller, dir, 1);
    INFO(out);
    CHECK(out.find("used all 2 restarts (launcher.max_restarts)") != std::string::npos);
  }
}

// Issue 29: with two learners, a death at any moment (in a step's collectives, or just
// after a step ends) is recovered in-run; the survivor's collective error is understood as
// a consequence of the death, never as the run's own failure.
TEST_CASE("one of two learners killed at any moment of a step is recovered in-run, with the same metrics") {
  const std::vector<std::string> two_learners = {"learner.workers=2", "learner.micro_batch_size=16",
                                                 "launcher.max_restarts=6"};
  TempDir reference_dir;
  const std::string expected = finished_run(reference_dir, two_learners);
  TempDir dir;
  ChildProcess controller = start_run_until_step(dir, 1, two_learners);
  // After the step's line is written (the "~50 ms after a step ends" case) and at
  // different points inside the next steps, each rank in turn.
  const std::vector<std::pair<int, int>> kills = {{2, 0}, {4, 30}, {6, 80}, {8, 5}};  // (step, delay ms)
  int rank = 1;
  for (const auto& [step, delay_ms] : kills) {
    wait_for_step(controller, dir, step);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    REQUIRE(::kill(worker_pid(controller.pid(), "learner", rank), SIGKILL) == 0);
    rank = 1 - rank;
  }
  const std::string out = output_at_exit(controller, dir, 0);
  INFO(out);
  CHECK(out.find("restarting the learners") != std::string::npos);
  CHECK(out.find("all_reduce failed") == std::string::npos);  // never the run's error
  check_same_metrics(expected, dir.path() + "/run");
}

// Sharded learners snapshot and reload their own shards: parameters and moments (fsdp),
// moments only (zero2).
TEST_CASE("sharded learners (fsdp, zero2) killed mid-run go back to their snapshots, with the same metrics") {
  for (const std::string sharding : {"fsdp", "zero2"}) {
    INFO(sharding);
    const std::vector<std::string> settings = {"learner.workers=2", "learner.micro_batch_size=16",
                                               "learner.sharding=" + sharding};
    TempDir reference_dir;
    const std::string expected = finished_run(reference_dir, settings);
    TempDir dir;
    ChildProcess controller = start_run_until_step(dir, 4, settings);
    REQUIRE(::kill(worker_pid(controller.pid(), "learner", 1), SIGKILL) == 0);
    const std::string out = output_at_exit(controller, dir, 0);
    INFO(out);
    CHECK(out.find("from their snapshot in memory") != std::string::npos);
    check_same_metrics(expected, dir.path() + "/run");
  }
}

// A snapshot directory the learners cannot write to turns snapshots off with a warning;
// the run goes on, and a learner's death goes back to the last checkpoint.
TEST_CASE("learner snapshots that cannot be written are turned off; recovery uses the checkpoint") {
  TempDir dir;
  ChildProcess controller = start_run_until_step(dir, 4, {"learner.snapshot_dir=/dev/null"});
  REQUIRE(::kill(worker_pid(controller.pid(), "learner", 0), SIGKILL) == 0);
  const std::string out = output_at_exit(controller, dir, 0);
  INFO(out);
  CHECK(out.find("learner snapshots are off for the rest of the run") != std::string::npos);
  CHECK(out.find("the learners go back to the step 3 checkpoint") != std::string::npos);
  check_same_metrics(reference_run(), dir.path() + "/run");
}

// Issue 29: a controller stopped (SIGSTOP) longer than the workers' patience. They exit as
// designed (exit 75, the controller lost); once it runs again the controller restarts them
// all without counting restarts (launcher.max_restarts 0 here) and the run ends as an
// undisturbed one would.
TEST_CASE("a controller paused past the workers' timeout restarts them without counting restarts") {
  const std::vector<std::string> settings = {"launcher.heartbeat_timeout_s=2", "launcher.max_restarts=0",
                                             "learner.workers=2", "learner.micro_batch_size=16",
                                             "experiment.steps=40"};
  TempDir reference_dir;
  const std::string expected = finished_run(reference_dir, settings);
  TempDir dir;
  // After step 4: not a checkpoint step (every 3), so the learners' way back is a snapshot.
  ChildProcess controller = start_run_until_step(dir, 4, settings);
  const std::vector<int> workers = {worker_pid(controller.pid(), "rollout", 0), worker_pid(controller.pid(), "learner", 1)};
  controller.send_signal(SIGSTOP);
  // Until the workers gave up on it (2 s without heartbeats), and a little more.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool all_gone = false;
  while (!all_gone && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    all_gone = true;
    for (int pid : workers) all_gone = all_gone && !process_alive(pid);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  controller.send_signal(SIGCONT);
  CHECK(all_gone);
  const std::string out = output_at_exit(controller, dir, 0);
  INFO(out);
  CHECK(out.find("the controller itself was paused or starved; restarting it without counting") != std::string::npos);
  CHECK(out.find("from their snapshot in memory") != std::string::npos);  // the learners kept it
  check_same_metrics(expected, dir.path() + "/run");
  CHECK(metric_rows(dir.path() + "/run").back().at("perf/worker_restarts").get<double>() == 0);
}

bool ends_with_generating(std::string log) {
  while (!log.empty() && log.back() == '\n') log.pop_back();
  return log.size() >= 10 && log.compare(log.size() - 10, 10, "generating") == 0;
}

// Kills rollout worker `rank` while the controller waits for its generation (not in a
// sync, where an unaimed kill mostly lands: generating takes a few ms here). Stops the
// worker as soon as the controller's log (logging.level: debug) ends in "generating",
// kills it if the controller is still stuck there, and otherwise lets it go on and
// tries again.
void kill_while_generating(const ChildProcess& controller, const TempDir& dir, int rank) {
  const std::string log_path = dir.path() + "/run/logs/controller-0.log";
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int pid = worker_pid(controller.pid(), "rollout", rank);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!ends_with_generating(read_text(log_path))) {
      REQUIRE_MESSAGE(controller.running(), read_text(dir.path() + "/out.txt"));
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    REQUIRE(::kill(pid, SIGSTOP) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (ends_with_generating(read_text(log_path))) {
      REQUIRE(::kill(pid, SIGKILL) == 0);
      return;
    }
    REQUIRE(::kill(pid, SIGCONT) == 0);
  }
  FAIL("never caught the controller waiting for rollout worker ", rank, "'s generation");
}

// Steps in metrics.jsonl so far.
int steps_done(const TempDir& dir) { return static_cast<int>(metric_rows(dir.path() + "/run").size()); }

// weight_sync.method: collective (Gloo broadcast groups) instead of the shm mailbox. The
// same weights must reach the rollout workers, so every metric equals the shm run's.
TEST_CASE("collective weight sync gives the shm run's metrics, disaggregated and colocated") {
  TempDir disaggregated;
  check_same_metrics(reference_run(), finished_run(disaggregated, {"weight_sync.method=collective"}));
  // Learner rank 0 sends to both rollout workers.
  CHECK(read_text(disaggregated.path() + "/run/logs/controller-0.log").find("new collective group of 3 ranks") !=
        std::string::npos);
  TempDir shm, collective;
  check_same_metrics(finished_run(shm, {"placement=colocated"}),
                     finished_run(collective, {"placement=colocated", "weight_sync.method=collective"}));
  // The colocated slot 0 takes its weights in memory; only rollout rank 1 joins the group.
  CHECK(read_text(collective.path() + "/run/logs/controller-0.log").find("new collective group of 2 ranks") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(collective.path() + "/run/weight_sync"));  // rendezvous directories cleaned up
}

// A dead member breaks a broadcast group: the controller restarts it and builds a new
// group, redoing a sync the death interrupted, or publishing to the restarted worker alone.
TEST_CASE("with collective weight sync, killed rollout workers and a killed learner rejoin in new groups") {
  // Steps enough for three deaths and their recoveries, whenever the kills land.
  TempDir reference;
  const std::string expected = finished_run(reference, {"experiment.steps=30"});
  TempDir dir;
  const std::vector<std::string> settings = {"experiment.steps=30", "weight_sync.method=collective",
                                             "launcher.max_restarts=3", "logging.level=debug",
                                             "weight_sync.timeout_s=10"};  // a stuck group fails fast
  ChildProcess controller = start_run_until_step(dir, 3, settings);
  kill_while_generating(controller, dir, 1);
  wait_for_step(controller, dir, steps_done(dir) + 2);
  // Killed at once: mostly during a sync (generating takes a few ms here, a sync ~10 ms).
  REQUIRE(::kill(worker_pid(controller.pid(), "rollout", 0), SIGKILL) == 0);
  wait_for_step(controller, dir, steps_done(dir) + 2);
  REQUIRE(::kill(worker_pid(controller.pid(), "learner", 0), SIGKILL) == 0);
  const std::string out = output_at_exit(controller, dir, 0);
  INFO(out);
  check_same_metrics(expected, dir.path() + "/run");
  check_every_response_once(dir.path() + "/run", 3);
  const std::string log = read_text(dir.path() + "/run/logs/controller-0.log");
  size_t groups = 0;
  for (size_t at = log.find("new collective group"); at != std::string::npos; at = log.find("new collective group", at + 1)) {
    ++groups;
  }
  CHECK(groups >= 4);  // the first, then at least one after each death
  CHECK(log.find("new collective group of 2 ranks") != std::string::npos);  // to the worker killed while generating
}

TEST_CASE("asynchronous RL: stale steps carry importance weights; interrupted, learner-killed and rollout-killed "
          "runs end with the uninterrupted run's metrics") {
  const std::vector<std::string> async = {"algorithm.async.max_staleness=1", "algorithm.async.is_cap=1.5"};
  TempDir reference_dir;
  const std::string expected = finished_run(reference_dir, async);
  const auto rows = metric_rows(expected);
  REQUIRE(rows.size() == 12);
  for (const auto& row : rows) {
    const int step = row.at("step").get<int>();
    INFO("step ", step);
    // Step 1 and each step after a checkpoint (every 3) generate on the newest weights;
    // the others were generated during the step before, one version behind.
    const bool fresh = step == 1 || (step - 1) % 3 == 0;
    CHECK(row.at("async/staleness_mean").get<double>() == (fresh ? 0.0 : 1.0));
    const double weight = row.at("async/is_weight_mean").get<double>();
    const double clipped = row.at("async/is_clipped_share").get<double>();
    if (fresh) {
      CHECK(weight == 1.0);
      CHECK(clipped == 0.0);
      CHECK(row.contains("perf/rollout_tokens_per_s"));
    } else {
      CHECK(weight > 0.0);
      CHECK(weight <= 1.5);
      CHECK(weight != 1.0);  // the learners' weights moved since the rollout's
      CHECK(clipped >= 0.0);
      CHECK(clipped <= 1.0);
      CHECK_FALSE(row.contains("perf/rollout_tokens_per_s"));  // it ran during the step before
    }
    CHECK(row.at("response/count").get<double>() == 8 * 4);
  }

  {
    TempDir dir;
    ChildProcess controller = start_run_until_step(dir, 5, async);
    controller.send_signal(SIGTERM);
    const auto status = controller.wait_for(30);
    REQUIRE(status.has_value());
    CHECK(status->exit_code == 143);
    const std::string out = dir.path() + "/resume.txt";
    const ExitStatus resumed = run_tandem({"resume", dir.path() + "/run"}, out, 120);
    INFO(read_text(out));
    REQUIRE(resumed.exit_code == 0);
    check_same_metrics(expected, dir.path() + "/run");
  }
  {
    TempDir dir;
    ChildProcess controller = start_run_until_step(dir, 5, async);
    REQUIRE(::kill(worker_pid(controller.pid(), "learner", 0), SIGKILL) == 0);
    const std::string out = output_at_exit(controller, dir, 0);
    INFO(out);
    check_same_metrics(expected, dir.path() + "/run");
  }
  {
    TempDir dir;
    ChildProcess controller = start_run_until_step(dir, 4, async);
    REQUIRE(::kill(worker_pid(controller.pid(), "rollout", 1), SIGKILL) == 0);
    const std::string out = output_at_exit(controller, dir, 0);
    INFO(out);
    check_same_metrics(expected, dir.path() + "/run");
    check_every_response_once(dir.path() + "/run", 1);
  }
}

TEST_CASE("partial rollouts: a rollout still generating when training ends goes on with the new weights; a rollout "
          "worker killed mid-run is redone") {
  // Every engine step of the rollout workers pauses, so that the rollout of the next step
  // outlasts this step's training on any machine and the weights change part-way.
  struct StepDelay {
    StepDelay() { ::setenv("TANDEM_TEST_ROLLOUT_STEP_DELAY_MS", "60", 1); }
    ~StepDelay() { ::unsetenv("TANDEM_TEST_ROLLOUT_STEP_DELAY_MS"); }
  } delay;
  const std::vector<std::string> partial = {"algorithm.async.max_staleness=1", "algorithm.async.partial_rollouts=true",
                                            "rollout.max_new_tokens=8"};
  auto check_rows = [](const std::string& run) {
    const auto rows = metric_rows(run);
    REQUIRE(rows.size() == 12);
    int partial_steps = 0;
    for (const auto& row : rows) {
      const int step = row.at("step").get<int>();
      INFO("step ", step);
      const bool fresh = step == 1 || (step - 1) % 3 == 0;
      const double staleness = row.at("async/staleness_mean").get<double>();
      const double share = row.at("async/partial_share").get<double>();
      CHECK(share >= 0.0);
      CHECK(share <= 1.0);
      if (fresh) {
        CHECK(staleness == 0.0);
        CHECK(share == 0.0);
      } else {
        // Tokens drawn after the update are of the learners' version: less than one behind on average.
        CHECK(staleness > 0.0);
        CHECK(staleness <= 1.0);
        if (share > 0) CHECK(staleness < 1.0);
        CHECK(row.at("async/is_weight_mean").get<double>() > 0.0);
        CHECK(row.at("async/is_weight_mean").get<double>() <= 2.0);
        partial_steps += share > 0 ? 1 : 0;
      }
      CHECK(row.at("response/count").get<double>() == 8 * 4);
    }
    CHECK(partial_steps > 0);
  };
  {
    TempDir dir;
    check_rows(finished_run(dir, partial));
  }
  {
    TempDir dir;
    ChildProcess controller = start_run_until_step(dir, 4, partial);
    REQUIRE(::kill(worker_pid(controller.pid(), "rollout", 1), SIGKILL) == 0);
    const std::string out = output_at_exit(controller, dir, 0);
    INFO(out);
    check_rows(dir.path() + "/run");
    check_every_response_once(dir.path() + "/run", 1);
  }
}
