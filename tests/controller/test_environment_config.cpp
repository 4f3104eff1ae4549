// An environment from config (`environment: {python, class}`), as users run it: rows
// without prompts, reset() making each sample's prompt, step() rewards summed into the
// reward with `reward: []`, the conversation in samples.jsonl and the learner trained on
// the prompts reset() made; the same in asynchronous RL with partial rollouts, where
// trajectories continue on newer weights. And what `validate` refuses, exit 2 naming
// where: a missing class, methods with the wrong signatures, a reset() that raises on the
// first row (naming the row), a reset() prompt over the limit, a warm-up with an
// environment. A C++ plugin's environment (the example plugin's) runs the same way.
#include "core/files.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

using namespace tandem;
using namespace tandem::testing;

namespace {

constexpr const char* kEnvironment = R"PY(
import time


class Countdown:
    """The model must say the row's number; the reward is 1 when the reply has it."""

    def __init__(self, row, prefix="Say", delay=0.0):
        self.number = row["number"]  # JSON types kept: an int
        assert isinstance(self.number, int), type(self.number)
        self.prefix = prefix
        self.delay = delay
        self.turn = 0

    def reset(self):
        return [{"role": "system", "content": "Be brief."}, f"{self.prefix} {self.number}."]

    def step(self, action):
        self.turn += 1
        time.sleep(self.delay)
        if str(self.number) in action:
            return "Right.", 1.0, True, {}
        return f"No. {self.prefix} {self.number}.", -0.25, False, {"turn": self.turn}

class Broken:
    def __init__(self, row):
        if row["number"] == 7:
            raise RuntimeError("seven is not allowed")
    def reset(self):
        return "hi"
    def step(self, action):
        return None, 0.0, True, {}

class NoAction:
    def __init__(self, row):
        pass
    def reset(self):
        return "hi"
    def step(self):
        return None, 0.0, True, {}

class Long:
    def __init__(self, row):
        pass
    def reset(self):
        return "x" * 4000
    def step(self, action):
        return None, 0.0, True, {}
)PY";

constexpr const char* kTemplate =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

std::string write_inputs(const std::string& d) {
  std::ofstream(d + "/envs.py") << kEnvironment;
  std::ofstream(d + "/chatml.jinja") << kTemplate;
  std::ofstream rows(d + "/rows.jsonl");
  for (int n : {7, 3, 12, 5}) rows << "{\"number\": " << n << "}\n";
  rows.close();
  const std::string config = d + "/env.yaml";
  std::ofstream(config) << "model: {path: \"builtin:tiny\"}\n"
                           "data: {train: rows.jsonl, chat_template: chatml.jinja, batch_size: 4}\n"
                           "environment: {python: envs.py, class: Countdown, kwargs: {prefix: Say}, workers: 2}\n"
                           "reward: []\n"
                           "algorithm: {group_size: 2}\n"
                           "rollout: {max_new_tokens: 4, multi_turn: {max_turns: 3, max_total_tokens: 200}}\n"
                           "experiment: {steps: 2}\n"
                           "logging: {samples_per_step: 8, console: plain}\n";
  return config;
}

// Each logged conversation: reset()'s messages first, marked as the prompt's, then the
// turns; every environment reply repeats the row's number, and the sample's reward is
// what the replies imply: -0.25 per wrong turn, 1 at the right one.
void check_samples(const std::string& run_dir, size_t expected) {
  const std::vector<nlohmann::json> samples = read_json_lines(run_dir + "/samples.jsonl");
  REQUIRE(samples.size() == expected);
  for (const nlohmann::json& s : samples) {
    const nlohmann::json& messages = s.at("messages");
    REQUIRE(messages.size() >= 3);
    CHECK(messages[0]["role"] == "system");
    CHECK(messages[0]["prompt"] == true);
    CHECK(messages[1]["role"] == "user");
    CHECK(messages[1]["prompt"] == true);
    const std::string asked = messages[1]["content"];
    CHECK(asked.rfind("Say ", 0) == 0);
    CHECK(messages[2]["role"] == "assistant");
    double reward = 0;
    for (size_t m = 2; m < messages.size(); ++m) {
      if (messages[m]["role"] != "user") continue;
      CHECK(messages[m]["content"] == "No. " + asked);
      reward -= 0.25;
    }
    const std::string stop = s.at("stop_reason");
    REQUIRE((stop == "env_done" || stop == "max_turns"));
    if (stop == "env_done") reward += 1.0;
    if (stop == "max_turns") reward -= 0.25;  // the last action was stepped too
    // Rewards are multiples of 1/4 (-0.25, 1): float64 sums of them are exact in any order;
    // Approx's default 1.2e-5 relative bound is slack, not a measured figure.
    CHECK(s.at("reward").get<double>() == doctest::Approx(reward));
  }
}

}  // namespace

TEST_CASE("an environment from config: reset() makes the prompts, step() rewards are the reward") {
  TempDir dir;
  const std::string d = dir.path();
  const std::string config = write_inputs(d);
  const std::string run_dir = d + "/run";
  const ExitStatus status = run_tandem({"run", config, "--run-dir", run_dir}, d + "/run.out", 300);
  INFO(read_text(d + "/run.out"));
  REQUIRE(status.success());

  const std::vector<nlohmann::json> metrics = read_json_lines(run_dir + "/metrics.jsonl");
  REQUIRE(metrics.size() == 2);
  for (const nlohmann::json& row : metrics) {
    // No reward section: the reward is the environment's alone. Both means average the
    // same multiples of 1/4 over 8 samples (float64: exact whatever the order), so
    // Approx's default 1.2e-5 relative bound is slack on any CPU.
    CHECK(row.at("reward/mean").get<double>() == doctest::Approx(row.at("multi_turn/env_reward_mean").get<double>()));
    CHECK(row.at("multi_turn/env_steps_mean").get<double>() >= 1.0);
    // Batch 4 x group 2, each ended by the environment or the turns (200 tokens hold 3
    // turns of 4 tokens and the replies).
    CHECK(row.at("multi_turn/stop/env_done").get<double>() + row.at("multi_turn/stop/max_turns").get<double>() == 8);
  }
  check_samples(run_dir, 16);
}

TEST_CASE("an environment in asynchronous RL with partial rollouts: trajectories span weight versions") {
  TempDir dir;
  const std::string d = dir.path();
  const std::string config = write_inputs(d);
  const std::string run_dir = d + "/run";
  // Slow steps keep the rollout of step k+1 running while step k trains and syncs.
  const ExitStatus status =
      run_tandem({"run", config, "--run-dir", run_dir, "--set", "placement=disaggregated", "--set",
                  "algorithm.async.max_staleness=1", "--set", "algorithm.async.partial_rollouts=true", "--set",
                  "environment.kwargs={prefix: Say, delay: 0.3}", "--set", "experiment.steps=4"},
                 d + "/run.out", 300);
  INFO(read_text(d + "/run.out"));
  REQUIRE(status.success());
  double partial = 0;
  for (const nlohmann::json& row : read_json_lines(run_dir + "/metrics.jsonl")) {
    partial = std::max(partial, row.at("async/partial_share").get<double>());
    // Means of the same multiples of 1/4: exact in float64, the default bound is slack.
    CHECK(row.at("reward/mean").get<double>() == doctest::Approx(row.at("multi_turn/env_reward_mean").get<double>()));
  }
  CHECK(partial > 0);  // some trajectories continued on newer weights
  check_samples(run_dir, 32);
}

// The example plugin's say_number is Countdown in C++ (plugins/example/example_plugin.cpp).
std::vector<std::string> plugin_environment(const std::string& name = "say_number") {
  return {"--set", "environment.python=\"\"", "--set", "environment.class=\"\"", "--set",
          "environment.plugin=" + std::string(EXAMPLE_PLUGIN), "--set", "environment.name=" + name, "--set",
          "environment.kwargs={}"};
}

TEST_CASE("a C++ plugin's environment runs like a Python one") {
  TempDir dir;
  const std::string d = dir.path();
  const std::string config = write_inputs(d);
  const std::string run_dir = d + "/run";
  std::vector<std::string> args = {"run", config, "--run-dir", run_dir};
  for (const std::string& a : plugin_environment()) args.push_back(a);
  const ExitStatus status = run_tandem(args, d + "/run.out", 300);
  INFO(read_text(d + "/run.out"));
  REQUIRE(status.success());
  for (const nlohmann::json& row : read_json_lines(run_dir + "/metrics.jsonl")) {
    // Means of the same multiples of 1/4: exact in float64, the default bound is slack.
    CHECK(row.at("reward/mean").get<double>() == doctest::Approx(row.at("multi_turn/env_reward_mean").get<double>()));
    CHECK(row.at("multi_turn/env_steps_mean").get<double>() >= 1.0);
  }
  check_samples(run_dir, 16);

  std::vector<std::string> missing = {"validate", config};
  for (const std::string& a : plugin_environment("say_word")) missing.push_back(a);
  CHECK(run_tandem(missing, d + "/missing.out", 120).exit_code == 2);
  CHECK(read_text(d + "/missing.out").find("environment.name: no plugin registered an environment \"say_word\"") !=
        std::string::npos);
}

TEST_CASE("environment configs are refused before anything starts, naming where") {
  TempDir dir;
  const std::string d = dir.path();
  const std::string config = write_inputs(d);
  struct Case {
    std::vector<std::string> sets;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"environment.class=Missing"}, "envs.py has no class Missing (its functions and classes: Countdown, Broken, NoAction, Long)"},
      {{"environment.class=NoAction"}, "NoAction.step must take (self, action)"},
      {{"environment.class=Broken", "environment.kwargs={}"}, "rows.jsonl:1: the environment (" + d + "/envs.py) could not start on it"},
      {{"environment.class=Long", "environment.kwargs={}"}, "rows.jsonl:1: the prompt reset() made is"},
      {{"environment.kwargs={nope: 1}"}, "Countdown.__init__ must take (self, row, **kwargs)"},
      {{"sft.steps=5"}, "the supervised warm-up trains on prompts the dataset gives"},
      {{"environment.python=\"\"", "environment.class=\"\"", "reward=[]"}, "reward: at least one reward function is needed"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const std::string out_path = d + "/validate" + std::to_string(k) + ".out";
    std::vector<std::string> args = {"validate", config};
    for (const std::string& s : c.sets) args.insert(args.end(), {"--set", s});
    const ExitStatus status = run_tandem(args, out_path, 120);
    const std::string out = read_text(out_path);
    INFO(c.expected << "\n" << out);
    CHECK(status.exit_code == 2);
    CHECK(out.find(c.expected) != std::string::npos);
  }
}
