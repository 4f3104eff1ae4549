// Config loading: values, defaults, every kind of error, --set overrides, cross-field
// rules, and the resolved-config round trip.
#include "core/config.h"
#include "core/config_error.h"
#include "core/files.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <random>
#include <string>

using namespace tandem;

namespace {

// The problems a config produces (empty when it loads).
std::vector<std::string> problems_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    load_config_text(yaml, "x.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

std::string only_problem(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto problems = problems_of(yaml, overrides);
  REQUIRE_MESSAGE(problems.size() == 1, "problems: ", problems.size(), " first: ", problems.empty() ? "" : problems[0]);
  return problems[0];
}

}  // namespace

TEST_CASE("an empty config is all defaults") {
  Config c = load_config_text("", "x.yaml").config;
  Config d;
  CHECK(config_to_yaml(c) == config_to_yaml(d));
  CHECK(c.learner.optimizer.lr == 1.0e-4);
  CHECK(c.reward.size() == 1);
  CHECK(c.reward[0].name == "math_answer");
}

TEST_CASE("the quickstart config loads") {
  LoadedConfig loaded = load_config_file(TANDEM_SOURCE_DIR "/configs/quickstart.yaml");
  CHECK(loaded.config.experiment.name == "quickstart");
  CHECK(loaded.config.rollout.workers == 2);
  CHECK(loaded.config.algorithm.clip.high == doctest::Approx(0.28));
}

TEST_CASE("values are read into their fields") {
  Config c = load_config_text(R"(
experiment: {name: run1, seed: -7, steps: 12}
learner:
  optimizer: {lr: 3.0e-6, name: sgd}
  sharding: fsdp
algorithm: {kl: {estimator: k1, in: reward, coef: 0}}
reward:
  - {name: a, weight: 0.5}
  - {name: b, plugin: plugins/libb.so, weight: -2}
)", "x.yaml").config;
  CHECK(c.experiment.name == "run1");
  CHECK(c.experiment.seed == -7);
  CHECK(c.experiment.steps == 12);
  CHECK(c.learner.optimizer.lr == 3.0e-6);
  CHECK(c.learner.optimizer.name == "sgd");
  CHECK(c.learner.sharding == "fsdp");
  CHECK(c.algorithm.kl.estimator == "k1");
  CHECK(c.algorithm.kl.in == "reward");
  REQUIRE(c.reward.size() == 2);
  CHECK(c.reward[1].plugin == "plugins/libb.so");
  CHECK(c.reward[1].weight == -2.0);
}

TEST_CASE("errors name file, line, column, key path, what was found and what is allowed") {
  std::string yaml = "learner:\n  optimizer:\n    lr: fast\n";
  CHECK(only_problem(yaml) == "x.yaml:3:5: learner.optimizer.lr: expected a positive number, got \"fast\"");
  CHECK(only_problem("learner: {optimizer: {lr: -1}}") ==
        "x.yaml:1:23: learner.optimizer.lr: expected a positive number, got -1");
  CHECK(only_problem("experiment: {steps: 2.5}") ==
        "x.yaml:1:14: experiment.steps: expected an integer >= 1, got 2.5");
  CHECK(only_problem("experiment: {steps: 0}") == "x.yaml:1:14: experiment.steps: expected an integer >= 1, got 0");
  CHECK(only_problem("data: {shuffle: maybe}") == "x.yaml:1:8: data.shuffle: expected true or false, got \"maybe\"");
  CHECK(only_problem("rollout: {top_p: 1.5}") == "x.yaml:1:11: rollout.top_p: expected a number in (0, 1], got 1.5");
  CHECK(only_problem("rollout: {temperature: .nan}").find("expected a positive number, got \".nan\"") != std::string::npos);
  CHECK(only_problem("rollout: {temperature: [1, 2]}") ==
        "x.yaml:1:11: rollout.temperature: expected a positive number, got a list");
  CHECK(only_problem("rollout: {temperature: }") ==
        "x.yaml:1:11: rollout.temperature: expected a positive number, got nothing (null)");
}

TEST_CASE("choices list what is allowed, with a did-you-mean for near misses") {
  CHECK(only_problem("learner: {sharding: zero3}") ==
        "x.yaml:1:11: learner.sharding: expected one of ddp, zero2 or fsdp, got \"zero3\" (did you mean zero2?)");
  CHECK(only_problem("learner: {sharding: tensor_parallel}") ==
        "x.yaml:1:11: learner.sharding: expected one of ddp, zero2 or fsdp, got \"tensor_parallel\"");
}

TEST_CASE("unknown keys are errors with a did-you-mean") {
  CHECK(only_problem("experiment:\n  stpes: 3\n") == "x.yaml:2:3: experiment.stpes: unknown key (did you mean experiment.steps?)");
  CHECK(only_problem("lerner: {workers: 1}") == "x.yaml:1:1: lerner: unknown key (did you mean learner?)");
  std::string far = only_problem("data: {zzzzzzzz: 1}");
  CHECK(far.find("data.zzzzzzzz: unknown key (allowed here: train, val, prompt_key, batch_size, shuffle, max_prompt_length, on_long_prompt, answer_key, chat_template, add_generation_prompt, prompt_as_user_message or system_prompt)") != std::string::npos);
}

TEST_CASE("structure errors: duplicates, wrong kinds, missing required keys, bad YAML") {
  CHECK(only_problem("data: {batch_size: 8}\ndata: {batch_size: 16}\n") == "x.yaml:2:1: data: duplicate key");
  CHECK(only_problem("learner: 3") == "x.yaml:1:1: learner: expected a mapping, got 3");
  CHECK(only_problem("reward: {name: a}") == "x.yaml:1:1: reward: expected a list, got a mapping");
  CHECK(only_problem("reward: [3]") == "x.yaml:1:10: reward.0: expected a mapping, got 3");
  CHECK(only_problem("reward: [{weight: 2}]") == "x.yaml:1:11: reward.0.name: missing (required; or give python: FILE.py or http: URL)");
  CHECK(only_problem("experiment: {name: \"\"}") == "x.yaml:1:14: experiment.name: expected a non-empty string, got \"\"");
  std::string syntax = only_problem("data: {batch_size: 8\nrollout: [");
  CHECK(syntax.rfind("x.yaml:", 0) == 0);
  CHECK(syntax.find("invalid YAML") != std::string::npos);
  CHECK(only_problem("- 1\n- 2\n") == "x.yaml: the config must be a mapping of sections, got a list");
}

TEST_CASE("several errors are reported together") {
  auto problems = problems_of(R"(
experiment: {steps: -1, stpes: 2}
learner: {optimizer: {lr: fast, name: adam}}
rollout: {device: gpu}
)");
  CHECK(problems.size() == 5);
}

TEST_CASE("--set overrides are applied and validated the same way") {
  Config c = load_config_text("learner: {optimizer: {lr: 0.1}}", "x.yaml",
                              {"learner.optimizer.lr=3e-6", "rollout.workers=4", "data.batch_size=64",
                               "reward.0.weight=2", "algorithm.kl={coef: 0.5}"}).config;
  CHECK(c.learner.optimizer.lr == 3e-6);
  CHECK(c.rollout.workers == 4);
  CHECK(c.reward[0].weight == 2.0);
  CHECK(c.algorithm.kl.coef == 0.5);
  CHECK(c.algorithm.kl.estimator == "k3");  // the rest of the section keeps its defaults

  CHECK(only_problem("", {"learner.optimizer.lr=fast"}) ==
        "--set learner.optimizer.lr=fast: learner.optimizer.lr: expected a positive number, got \"fast\"");
  CHECK(only_problem("", {"learner.optimzer.lr=1"}) ==
        "--set learner.optimzer.lr=1: learner.optimzer: unknown key (did you mean learner.optimizer?)");
  CHECK(only_problem("", {"learner.optimizer.lr"}) == "--set learner.optimizer.lr: expected key.path=value");
  CHECK(only_problem("", {"reward.3.weight=1"}) ==
        "--set reward.3.weight=1: reward.3: expected a list index below 1, got \"3\"");
  CHECK(only_problem("placement: colocated", {"placement.x=1"}) ==
        "--set placement.x=1: placement.x: cannot set a key inside \"colocated\"");
  CHECK(only_problem("", {"placement.x=1"}) ==
        "--set placement.x=1: placement: expected one of colocated or disaggregated, got a mapping");
  CHECK(only_problem("", {"rollout.workers=[1"}).find("--set rollout.workers=[1: rollout.workers: value is not valid YAML") == 0);
  CHECK(only_problem("", {"a..b=1"}) == "--set a..b=1: a..b: empty key in the path");
}

TEST_CASE("cross-field rules name the numbers") {
  CHECK(only_problem("data: {batch_size: 30}\nrollout: {workers: 4}\n") ==
        "x.yaml:1:8: data.batch_size: 30 prompts cannot be split evenly over rollout.workers = 4 (30 % 4 = 2) "
        "(data.batch_size from x.yaml:1:8; rollout.workers from x.yaml:2:11)");
  CHECK(only_problem("data: {batch_size: 6}\nrollout: {workers: 1}\nalgorithm: {group_size: 3}\nlearner: {workers: 4, micro_batch_size: 1}\n") ==
        "x.yaml:4:11: learner.workers: 18 samples per step (data.batch_size 6 x algorithm.group_size 3) cannot "
        "be split into learner.mini_batches 1 x learner.workers 4 = 4 equal parts (learner.mini_batches from the "
        "default; learner.workers from x.yaml:4:11; data.batch_size from x.yaml:1:8; algorithm.group_size from "
        "x.yaml:3:13)");
  CHECK(only_problem("learner: {micro_batch_size: 5}") ==
        "x.yaml:1:11: learner.micro_batch_size: 256 samples per rank and mini-batch (256 samples / 1 mini-batches / "
        "learner.workers 1) are not a multiple of learner.micro_batch_size 5 (learner.micro_batch_size from x.yaml:1:11; "
        "learner.mini_batches from the default; learner.workers from the default; data.batch_size from the default; "
        "algorithm.group_size from the default)");
  // Tensor parallelism: workers a multiple of it; samples split over the data-parallel ranks only.
  CHECK(only_problem("learner: {workers: 3, tensor_parallel: 2}").find(
            "learner.workers 3 is not a multiple of learner.tensor_parallel 2") != std::string::npos);
  CHECK(problems_of("learner: {workers: 4, tensor_parallel: 4, micro_batch_size: 256}").empty());
  CHECK(only_problem("learner: {workers: 4, tensor_parallel: 2, micro_batch_size: 256}").find(
            "/ learner.workers 4 / learner.tensor_parallel 2 = 2 data-parallel ranks) are not a multiple") !=
        std::string::npos);
  CHECK(problems_of("learner: {workers: 2, tensor_parallel: 2, sharding: fsdp, micro_batch_size: 256}").empty());
  // LoRA: dropout and fsdp's recomputation do not mix; target names are checked.
  CHECK(only_problem("learner: {sharding: fsdp, lora: {rank: 8, dropout: 0.1}}").find(
            "learner.lora.dropout > 0 with learner.sharding fsdp is not supported") != std::string::npos);
  CHECK(only_problem("learner: {lora: {rank: 8, target_modules: [q_proj, vproj]}}").find(
            "\"vproj\" is not a projection of the model (did you mean v_proj?)") != std::string::npos);
  CHECK(problems_of("learner: {lora: {rank: 8, target_modules: all-linear, dropout: 0.05}}").empty());
  CHECK(only_problem("algorithm: {group_size: 1}\nlearner: {micro_batch_size: 1}").find(
            "advantage grpo compares samples of one prompt and needs group_size >= 2, got 1") != std::string::npos);
  CHECK(only_problem("algorithm: {clip: {dual_c: 0.5}}").find("dual clip needs a constant > 1") != std::string::npos);
  CHECK(only_problem("launcher: {heartbeat_timeout_s: 0.1}").find("must exceed launcher.heartbeat_interval_s") !=
        std::string::npos);
  CHECK(only_problem("reward: []").find("at least one reward function") != std::string::npos);
  // A --set that breaks a rule with a key of the file: the message points at the --set
  // (what the user just touched) and names both keys and where each came from.
  CHECK(only_problem("data: {batch_size: 30}", {"rollout.workers=4"}) ==
        "--set rollout.workers=4: rollout.workers: 30 prompts cannot be split evenly over rollout.workers = 4 "
        "(30 % 4 = 2) (data.batch_size from x.yaml:1:8; rollout.workers from --set rollout.workers=4)");
  CHECK(only_problem("", {"rollout.workers=5"}) ==
        "--set rollout.workers=5: rollout.workers: 32 prompts cannot be split evenly over rollout.workers = 5 "
        "(32 % 5 = 2) (data.batch_size from the default; rollout.workers from --set rollout.workers=5)");
}

TEST_CASE("the resolved config reads back as the same config") {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> unit(1e-9, 1.0);
  std::uniform_int_distribution<int64_t> small(1, 1000);
  for (int round = 0; round < 50; ++round) {
    double lr = unit(rng) * std::pow(10.0, -static_cast<double>(small(rng) % 8));
    double temperature = unit(rng) * 3;
    int64_t steps = small(rng);
    int64_t seed = static_cast<int64_t>(rng());
    Config c = load_config_text("", "x.yaml",
                                {fmt::format("learner.optimizer.lr={}", lr), fmt::format("rollout.temperature={}", temperature),
                                 fmt::format("experiment.steps={}", steps), fmt::format("experiment.seed={}", seed),
                                 "experiment.name=\"name: with colon\"", "reward.0.plugin=lib x.so"}).config;
    CHECK(c.learner.optimizer.lr == lr);
    std::string yaml = config_to_yaml(c);
    Config back = load_config_text(yaml, "resolved.yaml").config;
    CHECK(back.learner.optimizer.lr == lr);  // exact: the writer prints round-trip digits
    CHECK(back.rollout.temperature == temperature);
    CHECK(back.experiment.seed == seed);
    CHECK(back.experiment.steps == steps);
    CHECK(back.experiment.name == "name: with colon");
    CHECK(back.reward[0].plugin == "lib x.so");
    CHECK(config_to_yaml(back) == yaml);
  }
}

TEST_CASE("--explain annotates keys with their meaning and still parses") {
  std::string yaml = config_to_yaml(Config{}, true);
  CHECK(yaml.find("# peak learning rate") != std::string::npos);
  CHECK(yaml.find("# KV-cache memory budget per worker, MiB") != std::string::npos);
  CHECK(config_to_yaml(load_config_text(yaml, "explained.yaml").config) == config_to_yaml(Config{}));
}

TEST_CASE("a missing config file is a config error naming the path") {
  try {
    load_config_file("/nonexistent/x.yaml");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("/nonexistent/x.yaml: cannot read the config file") == 0);
  }
}

TEST_CASE("verl's key names get a pointer to ours, not a did-you-mean by spelling") {
  CHECK(only_problem("data: {train_batch_size: 64}") ==
        "x.yaml:1:8: data.train_batch_size: unknown key (verl's data.train_batch_size is data.batch_size here "
        "(prompts per step); docs/from_verl.md)");
  CHECK(only_problem("rollout: {n: 8}").find("verl's rollout.n is algorithm.group_size here") != std::string::npos);
  CHECK(only_problem("algorithm: {adv_estimator: grpo}").find("is algorithm.advantage here") != std::string::npos);
  CHECK(only_problem("algorithm: {use_kl_in_reward: true}").find("algorithm.kl.in: reward") != std::string::npos);
  CHECK(only_problem("data: {max_response_length: 512}").find("rollout.max_new_tokens") != std::string::npos);
  CHECK(only_problem("custom_reward_function: {path: r.py}").find("reward: [{python: FILE") != std::string::npos);
  CHECK(only_problem("trainer: {total_training_steps: 5}").find("experiment, launcher and logging") !=
        std::string::npos);
  // Not a verl key: the spelling guess as before.
  CHECK(only_problem("data: {batch_sise: 4}").find("did you mean data.batch_size?") != std::string::npos);
}

TEST_CASE("reward_kwargs keep YAML's types and read back; python.path is a list of directories") {
  const LoadedConfig loaded = load_config_text(
      "reward: [{python: r.py, reward_kwargs: {scale: 2, ratio: 0.5, name: \"1\", flag: true, none: null, "
      "list: [1, x], nested: {a: b}}}]\npython: {path: [venv/site, /abs]}\n",
      "x.yaml");
  const Config& c = loaded.config;
  REQUIRE(c.reward.size() == 1);
  CHECK(c.reward[0].reward_kwargs ==
        R"({"flag":true,"list":[1,"x"],"name":"1","nested":{"a":"b"},"none":null,"ratio":0.5,"scale":2})");
  CHECK(c.python.path == std::vector<std::string>{"venv/site", "/abs"});
  const Config again = load_config_text(config_to_yaml(c), "again.yaml").config;
  CHECK(again.reward[0].reward_kwargs == c.reward[0].reward_kwargs);
  CHECK(again.python.path == c.python.path);
  CHECK(load_config_text("", "x.yaml").config.reward[0].reward_kwargs == "{}");
  CHECK(only_problem("reward: [{python: r.py, reward_kwargs: 3}]") ==
        "x.yaml:1:25: reward.0.reward_kwargs: expected a mapping (name: value, ...), got 3");
  CHECK(only_problem("python: {path: {a: 1}}").find("python.path: expected a list of strings, got a mapping") !=
        std::string::npos);
}

TEST_CASE("python.path is relative to the config file's directory, or to the current one under --set") {
  TempDir dir;
  write_file_atomic(dir.path() + "/c.yaml", "python: {path: [site, /abs/site]}\n");
  const Config from_file = load_config_file(dir.path() + "/c.yaml").config;
  CHECK(from_file.python.path == std::vector<std::string>{dir.path() + "/site", "/abs/site"});
  const Config from_set = load_config_file(dir.path() + "/c.yaml", {"python.path=[venv/lib]"}).config;
  CHECK(from_set.python.path ==
        std::vector<std::string>{(std::filesystem::current_path() / "venv/lib").lexically_normal().string()});
}
