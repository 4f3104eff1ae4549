// The `tandem` command line as a user meets it: exit codes, no run directory after a
// config error, and no process left behind when the controller is interrupted or killed.
#include "core/files.h"
#include "core/process.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
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

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The children of a process, from /proc.
std::vector<int> children_of(int parent) {
  std::vector<int> children;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = read_text(entry.path() / "stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) children.push_back(std::stoi(name));
  }
  return children;
}

const char* long_run_config = R"(
experiment: {name: cli-test, steps: 1000000}
model: {path: "builtin:tiny"}
data: {train: "builtin:addition1", batch_size: 4}
algorithm: {group_size: 2}
rollout: {workers: 2, max_new_tokens: 2, kv_cache_mb: 8}
learner: {workers: 2, micro_batch_size: 1}
placement: disaggregated
launcher: {heartbeat_interval_s: 0.1, heartbeat_timeout_s: 2, shutdown_grace_s: 2, max_restarts: 0}
logging: {console: quiet}
)";

// Starts a long run and waits until its workers answer (metrics.jsonl has lines).
ChildProcess start_long_run(const TempDir& dir, std::vector<int>& workers) {
  write_file(dir.path() + "/long.yaml", long_run_config);
  ChildProcess controller = ChildProcess::spawn(
      {TANDEM_BINARY, "run", dir.path() + "/long.yaml", "--run-dir", dir.path() + "/run"}, {dir.path() + "/out.txt", false});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (read_text(dir.path() + "/run/metrics.jsonl").size() < 100) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, read_text(dir.path() + "/out.txt"));
    REQUIRE(controller.running());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  workers = children_of(controller.pid());
  REQUIRE(workers.size() == 4);
  return controller;
}

bool all_gone_within(const std::vector<int>& pids, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    bool any = false;
    for (int pid : pids) any = any || process_alive(pid);
    if (!any) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

TEST_CASE("validate prints the resolved config; errors exit 2") {
  TempDir dir;
  std::string out = dir.path() + "/out.txt";
  CHECK(run_tandem({"validate", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--set", "learner.optimizer.lr=3e-6"}, out)
            .exit_code == 0);
  std::string resolved = read_text(out);
  CHECK(resolved.find("lr: 3e-06") != std::string::npos);
  CHECK(resolved.find("micro_batch_size: 256") != std::string::npos);

  write_file(dir.path() + "/bad.yaml", "learner:\n  optimizer:\n    lr: fast\n");
  fs::remove(out);
  CHECK(run_tandem({"validate", dir.path() + "/bad.yaml"}, out).exit_code == 2);
  CHECK(read_text(out) == dir.path() + "/bad.yaml:3:5: learner.optimizer.lr: expected a positive number, got \"fast\"\n");
  CHECK(run_tandem({"validate"}, out).exit_code == 2);              // missing argument
  CHECK(run_tandem({"frobnicate"}, out).exit_code == 2);            // unknown subcommand
}

TEST_CASE("run with a bad config exits 2 and leaves no run directory") {
  TempDir dir;
  std::string out = dir.path() + "/out.txt";
  write_file(dir.path() + "/bad.yaml", "rollout: {workers: 3}\n");
  CHECK(run_tandem({"run", dir.path() + "/bad.yaml", "--run-dir", dir.path() + "/run"}, out).exit_code == 2);
  CHECK_FALSE(fs::exists(dir.path() + "/run"));
  CHECK(read_text(out).find("cannot be split evenly over rollout.workers = 3") != std::string::npos);

  CHECK(run_tandem({"run", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--set", "launcher.kind=slurm", "--run-dir",
                dir.path() + "/run"}, out).exit_code == 2);
  CHECK_FALSE(fs::exists(dir.path() + "/run"));
}

TEST_CASE("device: cuda without a usable GPU is a clear error, not a fallback") {
  TempDir dir;
  std::string out = dir.path() + "/out.txt";
  run_tandem({"version"}, out);
  if (read_text(out).find("CUDA devices: 0") == std::string::npos) {
    MESSAGE("skipped: a CUDA device is present, so device: cuda is valid here");
    return;
  }
  CHECK(run_tandem({"run", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--set", "rollout.device=cuda", "--run-dir",
                dir.path() + "/run"}, out).exit_code == 2);
  CHECK(read_text(out).find("rollout.device: cuda was asked for, but no CUDA device is usable") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path() + "/run"));
  // The GPU weight transports too, before anything starts.
  for (const std::string method : {"cuda_ipc", "nccl"}) {
    CHECK(run_tandem({"run", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--set", "weight_sync.method=" + method,
                      "--run-dir", dir.path() + "/run"}, out).exit_code == 2);
    CHECK(read_text(out).find("weight_sync.method: " + method + " needs a usable GPU") != std::string::npos);
    CHECK_FALSE(fs::exists(dir.path() + "/run"));
  }
  // Colocated with one rollout worker, no transport is used: nothing to refuse.
  CHECK(run_tandem({"run", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--set", "weight_sync.method=nccl", "--set",
                    "rollout.workers=1", "--set", "experiment.steps=2", "--set", "sft.steps=2", "--run-dir",
                    dir.path() + "/run"}, out).exit_code == 0);
}

TEST_CASE("a short run completes and leaves the run directory contract") {
  TempDir dir;
  std::string out = dir.path() + "/out.txt";
  CHECK(run_tandem({"run", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--set", "experiment.steps=3", "--set",
                "placement=disaggregated", "--set", "logging.console=plain", "--run-dir", dir.path() + "/run"}, out)
            .exit_code == 0);
  std::string run = dir.path() + "/run";
  CHECK(fs::exists(run + "/config.yaml"));
  CHECK(fs::exists(run + "/logs/controller-0.log"));
  CHECK(fs::exists(run + "/logs/rollout-0.log"));
  CHECK(fs::exists(run + "/logs/rollout-1.log"));
  CHECK(fs::exists(run + "/logs/learner-0.log"));
  CHECK(fs::exists(run + "/policy/model.safetensors"));
  std::string metrics = read_text(run + "/metrics.jsonl");
  CHECK(std::count(metrics.begin(), metrics.end(), '\n') == 3);
  CHECK(metrics.find("{\"step\":3,\"weight_version\":3,") != std::string::npos);
  CHECK(read_text(run + "/config.yaml").find("steps: 3") != std::string::npos);
  // A run directory is never reused.
  CHECK(run_tandem({"run", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--run-dir", run}, out).exit_code == 2);
}

// Issue 29: a tcp control plane on loopback is authenticated by default (another user of
// the host reaches 127.0.0.1 as well): launcher.auth auto means CURVE for any tcp.
TEST_CASE("launcher.transport: tcp on loopback runs with CURVE by default; auth: none opts out") {
  TempDir dir;
  const std::string out = dir.path() + "/out.txt";
  const std::vector<std::string> base = {"run", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--set",
                                         "experiment.steps=2", "--set", "sft.steps=0", "--set", "launcher.transport=tcp"};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--run-dir", dir.path() + "/curve"});
  REQUIRE_MESSAGE(run_tandem(args, out).exit_code == 0, read_text(out));
  const std::string log = read_text(dir.path() + "/curve/logs/controller-0.log");
  CHECK_MESSAGE(log.find("control plane tcp://127.0.0.1:") != std::string::npos, log);
  CHECK_MESSAGE(log.find("(CURVE, keys in") != std::string::npos, log);
  CHECK(fs::exists(dir.path() + "/curve/keys"));
  CHECK((fs::status(dir.path() + "/curve/keys").permissions() & fs::perms::others_all) == fs::perms::none);
  size_t keyed_workers = 0;  // each worker says it registered over CURVE
  for (const auto& entry : fs::directory_iterator(dir.path() + "/curve/logs")) {
    const std::string name = entry.path().filename();
    if (name.rfind("controller", 0) != 0 && read_text(entry.path()).find(", CURVE)") != std::string::npos) ++keyed_workers;
  }
  CHECK(keyed_workers >= 2);

  args = base;
  args.insert(args.end(), {"--set", "launcher.auth=none", "--run-dir", dir.path() + "/plain"});
  REQUIRE_MESSAGE(run_tandem(args, out).exit_code == 0, read_text(out));
  CHECK(read_text(dir.path() + "/plain/logs/controller-0.log").find("(no authentication)") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path() + "/plain/keys"));
}

// Sends `signal` to a running controller: it must stop every worker and exit 128 + signal.
void expect_orderly_stop(int signal, int expected_exit_code) {
  TempDir dir;
  std::vector<int> workers;
  ChildProcess controller = start_long_run(dir, workers);
  controller.send_signal(signal);
  auto status = controller.wait_for(20);
  REQUIRE(status.has_value());
  CHECK(status->exit_code == expected_exit_code);
  CHECK(all_gone_within(workers, 5));
  // tandem status: interrupted, resumable (exit 3), no worker shown as ready.
  const std::string said = dir.path() + "/status.txt";
  CHECK(run_tandem({"status", dir.path() + "/run"}, said).exit_code == 3);
  CHECK_MESSAGE(read_text(said).find("state:    interrupted (tandem resume continues it)") != std::string::npos,
                read_text(said));
  CHECK_MESSAGE(read_text(said).find(" ready ") == std::string::npos, read_text(said));
}

TEST_CASE("SIGTERM to the controller stops every worker and exits 143") { expect_orderly_stop(SIGTERM, 143); }

TEST_CASE("SIGINT (Ctrl-C) to the controller stops every worker and exits 130") { expect_orderly_stop(SIGINT, 130); }

TEST_CASE("SIGKILL of the controller leaves no orphan workers") {
  TempDir dir;
  std::vector<int> workers;
  ChildProcess controller = start_long_run(dir, workers);
  controller.send_signal(SIGKILL);
  controller.wait_for(10);
  CHECK(all_gone_within(workers, 5));
  // status.json still says running: tandem status finds the controller gone (exit 1), shows
  // no ETA and no worker as ready.
  const std::string said = dir.path() + "/status.txt";
  CHECK(run_tandem({"status", dir.path() + "/run"}, said).exit_code == 1);
  const std::string text = read_text(said);
  CHECK_MESSAGE(text.find("state:    controller gone") != std::string::npos, text);
  CHECK_MESSAGE(text.find("eta:") == std::string::npos, text);
  CHECK_MESSAGE(text.find(" ready ") == std::string::npos, text);
  CHECK_MESSAGE(text.find(" exited ") != std::string::npos, text);
}

TEST_CASE("a worker killed during a run with no restarts left fails the run with exit 1, naming the worker") {
  TempDir dir;
  std::vector<int> workers;
  ChildProcess controller = start_long_run(dir, workers);
  ::kill(workers[1], SIGKILL);
  auto status = controller.wait_for(20);
  REQUIRE(status.has_value());
  CHECK(status->exit_code == 1);
  std::string out = read_text(dir.path() + "/out.txt");
  CHECK(out.find("died: killed by signal 9 (SIGKILL)") != std::string::npos);
  CHECK(out.find(fmt::format("pid {})", workers[1])) != std::string::npos);
  CHECK(out.find("used all 0 restarts (launcher.max_restarts)") != std::string::npos);
  CHECK(all_gone_within(workers, 5));
  // tandem status: failed with its error (exit 1), workers stopped, no ETA.
  const std::string said = dir.path() + "/status.txt";
  CHECK(run_tandem({"status", dir.path() + "/run"}, said).exit_code == 1);
  const std::string text = read_text(said);
  CHECK_MESSAGE(text.find("state:    failed: ") != std::string::npos, text);
  CHECK_MESSAGE(text.find("killed by signal 9") != std::string::npos, text);
  CHECK_MESSAGE(text.find("eta:") == std::string::npos, text);
  CHECK_MESSAGE(text.find(" ready ") == std::string::npos, text);
}

TEST_CASE("tandem status tells a running run's step and workers; tandem stop checkpoints it and stops it") {
  TempDir dir;
  std::vector<int> workers;
  write_file(dir.path() + "/long.yaml", long_run_config);
  ChildProcess controller = start_long_run(dir, workers);
  const std::string run = dir.path() + "/run";
  const std::string out = dir.path() + "/status.txt";
  REQUIRE(run_tandem({"status", run}, out).success());
  const std::string status = read_text(out);
  CHECK_MESSAGE(status.find(fmt::format("state:    running (pid {})", controller.pid())) != std::string::npos, status);
  CHECK_MESSAGE(status.find(" / 1000000") != std::string::npos, status);
  CHECK_MESSAGE(status.find("eta:") != std::string::npos, status);
  for (const char* worker : {"rollout-0", "rollout-1", "learner-0", "learner-1"}) {
    CHECK_MESSAGE(status.find(std::string("  ") + worker) != std::string::npos, status);
  }
  CHECK_MESSAGE(status.find("ready") != std::string::npos, status);

  REQUIRE(run_tandem({"stop", run}, dir.path() + "/stop.txt").success());
  const auto ended = controller.wait_for(60);
  REQUIRE_MESSAGE(ended.has_value(), read_text(dir.path() + "/out.txt"));
  CHECK_MESSAGE(ended->success(), read_text(dir.path() + "/out.txt"));  // a stop asked for is not a failure
  CHECK(all_gone_within(workers, 10));
  const std::string said = read_text(dir.path() + "/out.txt");
  const size_t at = said.find("stopped after step ");
  REQUIRE_MESSAGE(at != std::string::npos, said);
  const int step = std::stoi(said.substr(at + 19));
  CHECK(fs::is_directory(fmt::format("{}/checkpoints/step_{}", run, step)));
  CHECK_FALSE(fs::exists(run + "/stop_request"));  // honoured, and gone: a resume does not stop at once
  CHECK_FALSE(fs::exists(run + "/finished.json"));

  CHECK(run_tandem({"status", run}, dir.path() + "/after.txt").exit_code == 3);  // stopped: resumable, not running
  CHECK_MESSAGE(read_text(dir.path() + "/after.txt").find("state:    stopped") != std::string::npos,
                read_text(dir.path() + "/after.txt"));
  // Stopping a run that is not running is a usage error.
  CHECK(run_tandem({"stop", run}, dir.path() + "/again.txt").exit_code == 2);
  CHECK(run_tandem({"status", dir.path()}, dir.path() + "/none.txt").exit_code == 2);
}

TEST_CASE("one controller per run directory: resume and run refuse a live run's directory, naming its pid") {
  TempDir dir;
  std::vector<int> workers;
  ChildProcess controller = start_long_run(dir, workers);
  const std::string run = dir.path() + "/run";
  const std::string holder = fmt::format("pid {}", controller.pid());
  const size_t metrics_before = read_text(run + "/metrics.jsonl").size();

  const std::string resumed = dir.path() + "/resume.txt";
  CHECK(run_tandem({"resume", run}, resumed).exit_code == 2);
  CHECK_MESSAGE(read_text(resumed).find(holder) != std::string::npos, read_text(resumed));
  const std::string again = dir.path() + "/again.txt";
  CHECK(run_tandem({"run", dir.path() + "/long.yaml", "--run-dir", run}, again).exit_code == 2);
  // The live run lost nothing: its metrics only grew, and it still runs.
  CHECK(read_text(run + "/metrics.jsonl").size() >= metrics_before);
  CHECK(controller.running());
  // `status` reads liveness from the lock.
  CHECK(run_tandem({"status", run}, dir.path() + "/status.txt").success());
  CHECK_MESSAGE(read_text(dir.path() + "/status.txt").find("running (pid") != std::string::npos,
                read_text(dir.path() + "/status.txt"));

  REQUIRE(::kill(controller.pid(), SIGKILL) == 0);  // dies holding the lock: the kernel drops it
  REQUIRE(controller.wait_for(30).has_value());
  CHECK(all_gone_within(workers, 10));
  CHECK(run_tandem({"status", run}, dir.path() + "/dead.txt").exit_code == 1);
  CHECK_MESSAGE(read_text(dir.path() + "/dead.txt").find("controller gone") != std::string::npos,
                read_text(dir.path() + "/dead.txt"));
}

TEST_CASE("several `tandem run` racing into one --run-dir: one runs, the others refuse with exit 2") {
  TempDir dir;
  const std::string config = dir.path() + "/short.yaml";
  std::string text = long_run_config;
  text.replace(text.find("steps: 1000000"), 14, "steps: 2");
  write_file(config, text);
  const std::string run = dir.path() + "/run";
  std::vector<ChildProcess> racers;
  for (int i = 0; i < 4; ++i) {
    racers.push_back(ChildProcess::spawn({TANDEM_BINARY, "run", config, "--run-dir", run},
                                         {fmt::format("{}/racer{}.txt", dir.path(), i), false}));
  }
  int succeeded = 0;
  for (int i = 0; i < 4; ++i) {
    const std::optional<ExitStatus> ended = racers[i].wait_for(120);
    REQUIRE(ended.has_value());
    const std::string said = read_text(fmt::format("{}/racer{}.txt", dir.path(), i));
    if (ended->success()) {
      ++succeeded;
      continue;
    }
    CHECK_MESSAGE(ended->exit_code == 2, said);
    const bool named = said.find("in use by a running controller (pid ") != std::string::npos ||
                       said.find("already exists and is not empty") != std::string::npos;
    CHECK_MESSAGE(named, said);
  }
  CHECK(succeeded == 1);
  const std::string metrics = read_text(run + "/metrics.jsonl");
  CHECK(std::count(metrics.begin(), metrics.end(), '\n') == 2);
}

TEST_CASE("Ctrl-C during a slow Python reward call stops the run at once, not after the call") {
  TempDir dir;
  write_file(dir.path() + "/slow.py",
             "import time\n"
             "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
             "    time.sleep(120)\n"
             "    return 1.0\n");
  write_file(dir.path() + "/slow.yaml", R"(
experiment: {name: slow-reward, steps: 3}
model: {path: "builtin:tiny"}
data: {train: "builtin:addition", batch_size: 4}
algorithm: {group_size: 2}
rollout: {workers: 1, max_new_tokens: 3, kv_cache_mb: 8}
learner: {workers: 1, micro_batch_size: 8}
reward: [{python: slow.py, workers: 1, timeout_s: 300}]
logging: {console: quiet}
)");
  const std::string run = dir.path() + "/run";
  ChildProcess controller = ChildProcess::spawn({TANDEM_BINARY, "run", dir.path() + "/slow.yaml", "--run-dir", run},
                                                {dir.path() + "/out.txt", false});
  // Running, and past its first rollout: the reward call of 120 s is under way.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_text(run + "/status.json").find("\"state\": \"running\"") == std::string::npos) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, read_text(dir.path() + "/out.txt"));
    REQUIRE(controller.running());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));
  REQUIRE(::kill(controller.pid(), SIGINT) == 0);
  const auto ended = controller.wait_for(30);  // far less than the call's 120 s
  REQUIRE_MESSAGE(ended.has_value(), read_text(dir.path() + "/out.txt"));
  CHECK(ended->exit_code == 130);
  CHECK(read_text(run + "/status.json").find("\"state\": \"interrupted\"") != std::string::npos);
}
