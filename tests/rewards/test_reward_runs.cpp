// Runs with Python rewards through `tandem` itself: a reward slower than the control
// plane's heartbeat timeout does not cost the run its workers (scoring runs on its own
// thread while the controller keeps heartbeating), and the mistakes a user makes with
// Python rewards and chat data are refused by `tandem validate` and `run` before anything
// starts (exit 2, naming where).
#include "core/files.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("a reward slower than the heartbeat timeout does not lose the workers") {
  TempDir dir;
  const std::string d = dir.path();
  // 6 samples x 0.5 s on one worker: 3 s of scoring per step, three times the 1 s after
  // which a worker that hears no controller heartbeat exits.
  write_text(d + "/slow.py", "import time\n"
                             "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                             "    time.sleep(0.5)\n"
                             "    return 1.0\n");
  write_text(d + "/c.yaml",
             "experiment: {name: slow-reward, steps: 2, checkpoint_every: 0}\n"
             "model: {path: \"builtin:tiny\"}\n"
             "data: {train: \"builtin:addition1\", batch_size: 3}\n"
             "algorithm: {group_size: 2}\n"
             "rollout: {workers: 1, max_new_tokens: 3, kv_cache_mb: 8}\n"
             "learner: {workers: 1, micro_batch_size: 6}\n"
             "reward: [{python: slow.py, workers: 1}]\n"
             "launcher: {heartbeat_interval_s: 0.1, heartbeat_timeout_s: 1, max_restarts: 0}\n"
             "logging: {console: plain}\n");
  const ExitStatus status = run_tandem({"run", d + "/c.yaml", "--run-dir", d + "/run"}, d + "/run.out", 240);
  INFO(read_text(d + "/run.out"));
  INFO("worker log: ", read_text(d + "/run/logs/colocated-0.log"));
  REQUIRE(status.success());
  const std::vector<nlohmann::json> metrics = read_json_lines(d + "/run/metrics.jsonl");
  REQUIRE(metrics.size() == 2);
  for (const nlohmann::json& row : metrics) {
    CHECK(row["reward/mean"] == 1.0);
    CHECK(row["perf/worker_restarts"] == 0.0);
  }
}

TEST_CASE("reward/timeouts counts each step's timeouts; a reward named timeouts gets a key of its own") {
  TempDir dir;
  const std::string d = dir.path();
  write_text(d + "/stuck.py", "import time\n"
                              "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                              "    time.sleep(30)\n"
                              "    return 1.0\n");
  write_text(d + "/c.yaml",
             "experiment: {name: timeouts, steps: 2, checkpoint_every: 0}\n"
             "model: {path: \"builtin:tiny\"}\n"
             "data: {train: \"builtin:addition1\", batch_size: 1}\n"
             "algorithm: {group_size: 2}\n"
             "rollout: {workers: 1, max_new_tokens: 3, kv_cache_mb: 8}\n"
             "learner: {workers: 1, micro_batch_size: 2}\n"
             "reward: [{python: stuck.py, workers: 1, timeout_s: 0.5, on_error: fallback},\n"
             "         {name: timeouts, python: stuck.py, workers: 1, timeout_s: 0.5, on_error: fallback, weight: 0}]\n"
             "logging: {console: plain}\n");
  const ExitStatus status = run_tandem({"run", d + "/c.yaml", "--run-dir", d + "/run"}, d + "/run.out", 240);
  INFO(read_text(d + "/run.out"));
  REQUIRE(status.success());
  const std::vector<nlohmann::json> metrics = read_json_lines(d + "/run/metrics.jsonl");
  REQUIRE(metrics.size() == 2);
  for (const nlohmann::json& row : metrics) {
    // 2 samples x 2 rewards time out every step: 4 per step, not a running total.
    CHECK(row["reward/timeouts"] == 4.0);
    CHECK(row["reward/fallbacks"] == 4.0);
    CHECK(row.contains("reward/timeouts_1"));  // the reward named timeouts, beside the counter
  }
}

TEST_CASE("python rewards and chat data that cannot work are refused before anything starts (exit 2)") {
  TempDir dir;
  const std::string d = dir.path();
  write_text(d + "/data/rows.jsonl", "{\"prompt\": \"1+2=\", \"answer\": \"3\"}\n");
  write_text(d + "/data/chat.jsonl", "{\"prompt\": \"1+2=\", \"answer\": \"3\"}\n"
                                     "{\"prompt\": [{\"role\": \"user\", \"content\": \"2+2=\"}], \"answer\": \"4\"}\n");
  write_text(d + "/rewards/broken.py", "def compute_score(data_source, solution_str, ground_truth, extra_info=None)\n");
  write_text(d + "/rewards/ok.py", "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                   "    return 1.0\n");
  const std::string base = "experiment: {name: refuse, steps: 1}\nmodel: {path: \"builtin:tiny\"}\n"
                           "algorithm: {group_size: 2}\nrollout: {workers: 1, max_new_tokens: 3, kv_cache_mb: 8}\n"
                           "learner: {workers: 1, micro_batch_size: 2}\n";
  struct Case {
    std::string name, data, reward, expected;
  };
  const std::vector<Case> cases = {
      {"syntax error", "{train: data/rows.jsonl, batch_size: 1}", "[{python: rewards/broken.py}]",
       "reward.0.python: reward.0 (" + d + "/rewards/broken.py:compute_score): importing " + d +
           "/rewards/broken.py failed"},
      {"missing function", "{train: data/rows.jsonl, batch_size: 1}", "[{python: rewards/ok.py, function: score}]",
       "has no function score (its functions and classes: compute_score)"},
      {"missing file", "{train: data/rows.jsonl, batch_size: 1}", "[{python: rewards/nope.py}]",
       "reward.0.python"},
      {"python and plugin", "{train: data/rows.jsonl, batch_size: 1}",
       "[{python: rewards/ok.py, plugin: libx.so}]", "reward.0.python: a reward is one of: a Python file (python), a plugin's (plugin), a server (http), a reward model (model)"},
      {"python settings on a C++ reward", "{train: data/rows.jsonl, batch_size: 1}",
       "[{name: math_answer, timeout_s: 3}]", "reward.0.timeout_s: only python and http rewards read timeout_s"},
      {"http URL", "{train: data/rows.jsonl, batch_size: 1}", "[{http: \"localhost:8000/score\"}]",
       "reward.0.http: \"localhost:8000/score\" is not an http:// or https:// URL"},
      {"messages without a template", "{train: data/chat.jsonl, batch_size: 1}", "[{python: rewards/ok.py}]",
       d + "/data/chat.jsonl:2: the prompt is a list of chat messages but there is no chat template"},
      {"nested answer missing", "{train: data/rows.jsonl, batch_size: 1, answer_key: reward_model.ground_truth}",
       "[{name: math_answer}]", "no \"reward_model.ground_truth\" field (the answer reward.0 (math_answer) compares, "
                                "found by data.answer_key (" + d + "/c.yaml:"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    write_text(d + "/c.yaml", base + "data: " + c.data + "\nreward: " + c.reward + "\n");
    for (const std::string& command : {std::string("validate"), std::string("run")}) {
      const std::string out = d + "/" + command + ".out";
      fs::remove(out);
      std::vector<std::string> args = {command, d + "/c.yaml"};
      if (command == "run") args.insert(args.end(), {"--run-dir", d + "/runs/x"});
      const ExitStatus status = run_tandem(args, out, 120);
      const std::string text = read_text(out);
      INFO(command, ": ", text);
      CHECK(status.exit_code == 2);
      CHECK(text.find(c.expected) != std::string::npos);
      CHECK_FALSE(fs::exists(d + "/runs/x"));
    }
  }
  // A python reward with a fine file validates (its workers start and import it).
  write_text(d + "/c.yaml", base + "data: {train: data/rows.jsonl, batch_size: 1}\nreward: [{python: rewards/ok.py}]\n");
  const ExitStatus ok = run_tandem({"validate", d + "/c.yaml"}, d + "/ok.out", 120);
  INFO(read_text(d + "/ok.out"));
  CHECK(ok.success());
  CHECK(read_text(d + "/ok.out").find("name: \"ok\"") != std::string::npos);  // named after the file
}
