// Runs that watch themselves: Chrome traces of logging.trace_every read back and
// profiled by `tandem profile`, per-worker command times (worker_phases.jsonl) and a
// straggler made on purpose.
#include "core/files.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> quickstart(const std::string& run_dir, std::vector<std::string> sets) {
  std::vector<std::string> args = {"run", TANDEM_SOURCE_DIR "/configs/quickstart.yaml", "--run-dir", run_dir,
                                   "--set", "logging.console=plain", "--set", "sft.steps=0",
                                   "--set", "experiment.checkpoint_every=0", "--set", "placement=disaggregated"};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

}  // namespace

TEST_CASE("logging.trace_every writes Chrome traces of every process; tandem profile reads them") {
  TempDir dir;
  const std::string run = dir.path() + "/run", out = dir.path() + "/out.txt";
  const ExitStatus status =
      run_tandem(quickstart(run, {"experiment.steps=4", "logging.trace_every=2", "rollout.workers=2"}), out, 300);
  REQUIRE_MESSAGE(status.exit_code == 0, read_text(out));
  CHECK_FALSE(fs::exists(run + "/traces/step_1.json"));
  CHECK_FALSE(fs::exists(run + "/traces/step_3.json"));
  for (int step : {2, 4}) {
    CAPTURE(step);
    const std::string path = run + "/traces/step_" + std::to_string(step) + ".json";
    REQUIRE(fs::exists(path));
    const nlohmann::json trace = nlohmann::json::parse(read_text(path));
    CHECK(trace["otherData"]["step"] == step);
    const int64_t duration = trace["otherData"]["duration_us"].get<int64_t>();
    CHECK(duration > 0);
    std::map<int, std::string> processes;
    std::map<std::string, std::set<std::string>> spans;  // process -> span names
    for (const nlohmann::json& e : trace["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "process_name") {
        const std::string name = e["args"]["name"];
        processes[e["pid"].get<int>()] = name.substr(0, name.find(' '));
      }
    }
    for (const nlohmann::json& e : trace["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const int64_t ts = e["ts"].get<int64_t>(), dur = e["dur"].get<int64_t>();
      CHECK(ts >= 0);
      CHECK(dur >= 0);
      CHECK(ts + dur <= duration);
      spans[processes.at(e["pid"].get<int>())].insert(e["name"].get<std::string>());
    }
    CHECK(processes.size() == 4);  // the controller, rollout-0, rollout-1, learner-0
    for (const char* phase : {"rollout", "reward", "advantages", "train", "sync"}) CHECK(spans["controller"].count(phase));
    for (const char* worker : {"rollout-0", "rollout-1"}) {
      CAPTURE(worker);
      CHECK(spans[worker].count("rollout_generate"));
      CHECK(spans[worker].count("prefill"));
      CHECK(spans[worker].count("decode"));
      CHECK(spans[worker].count("rollout_load_weights"));
    }
    CHECK(spans["learner-0"].count("learner_train"));
    CHECK(spans["learner-0"].count("micro_batch"));
    CHECK(spans["learner-0"].count("optimizer_step"));
    CHECK(spans["learner-0"].count("pack_bucket"));  // shm weight sync on one host
    // One host, one monotonic clock: each measured offset is within its error (and a
    // millisecond of scheduling slack) of zero.
    for (const auto& [name, clock] : trace["otherData"]["clocks"].items()) {
      CAPTURE(name);
      CHECK(std::llabs(clock["offset_us"].get<int64_t>()) <= clock["error_us"].get<int64_t>() + 1000);
    }
  }
  const std::string profile = dir.path() + "/profile.txt";
  CHECK(run_tandem({"profile", run, "--step", "2"}, profile).exit_code == 0);
  const std::string text = read_text(profile);
  CAPTURE(text);
  CHECK(text.find("step 2:") != std::string::npos);
  CHECK(text.find("critical path:") != std::string::npos);
  CHECK(text.find("rollout ") != std::string::npos);
  CHECK(text.find("rollout_generate") != std::string::npos);
  CHECK(text.find("learner_train") != std::string::npos);
  for (const char* worker : {"rollout-0", "rollout-1", "learner-0"}) CHECK(text.find(worker) != std::string::npos);
  // Without --step: the newest trace.
  CHECK(run_tandem({"profile", run}, profile).exit_code == 0);
  CHECK(read_text(profile).find("step 4:") != std::string::npos);
  CHECK(run_tandem({"profile", run, "--step", "3"}, profile).exit_code == 2);
  CHECK(read_text(profile).find("no trace of step 3") != std::string::npos);
}

TEST_CASE("a worker slower than its peers is reported as a straggler; worker_phases.jsonl has every worker's times") {
  TempDir dir;
  const std::string run = dir.path() + "/run", out = dir.path() + "/out.txt";
  // Test-only hooks of `tandem worker` (controller/cli/worker.cpp): rollout-1 sleeps 0.4 s in each generate.
  ::setenv("TANDEM_TEST_COMMANDS", "1", 1);
  ::setenv("TANDEM_TEST_SLOW_WORKER", "rollout-1:rollout_generate:0.4", 1);
  const ExitStatus status = run_tandem(
      quickstart(run, {"experiment.steps=5", "rollout.workers=4", "logging.straggler.steps=2"}), out, 300);
  ::unsetenv("TANDEM_TEST_SLOW_WORKER");
  ::unsetenv("TANDEM_TEST_COMMANDS");
  REQUIRE_MESSAGE(status.exit_code == 0, read_text(out));
  const std::vector<nlohmann::json> metrics = read_json_lines(run + "/metrics.jsonl");
  REQUIRE(metrics.size() == 5);
  CHECK(metrics[0]["perf/stragglers"] == 0);  // slow once: not yet
  for (size_t i = 1; i < metrics.size(); ++i) CHECK(metrics[i]["perf/stragglers"] == 1);
  const std::vector<nlohmann::json> phases = read_json_lines(run + "/worker_phases.jsonl");
  REQUIRE(phases.size() == 5);
  for (const nlohmann::json& p : phases) {
    for (const char* worker : {"rollout-0", "rollout-1", "rollout-2", "rollout-3", "learner-0"}) CHECK(p["workers"].contains(worker));
    const double slow = p["workers"]["rollout-1"]["rollout_generate"];
    CHECK(slow >= 0.4);
    CHECK(slow > 1.5 * p["workers"]["rollout-0"]["rollout_generate"].get<double>());
    CHECK(p["workers"]["learner-0"]["learner_train"].get<double>() > 0);
  }
  CHECK(phases[0]["stragglers"].empty());
  CHECK(phases[4]["stragglers"] == nlohmann::json::array({"rollout-1"}));
  const std::string log = read_text(run + "/logs/controller-0.log");
  CHECK(log.find("rollout-1 is a straggler: rollout_generate took") != std::string::npos);
}
