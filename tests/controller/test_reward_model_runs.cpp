// `tandem train-rm` end to end on real learner workers: a reward model learns a checkable
// preference (correct sums over wrong ones), exports as a Hugging Face sequence classifier,
// resumes from a checkpoint to the same numbers, and bad input stops it before it starts.
// The Bradley-Terry loss and the learner's step are checked against float64 and across
// ranks in tests/learner/test_preference_loss.cpp and test_trainer.cpp.
#include "core/safetensors.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace tandem;
using namespace tandem::testing;

namespace {

const char* kConfig = R"(experiment: {name: rm, seed: 1, steps: 240, checkpoint_every: 120, eval_every: 80}
model: {path: "builtin:tiny"}
reward_model: {train: pairs.jsonl, batch_size: 32, max_length: 64}
learner: {workers: 1, micro_batch_size: 16, optimizer: {lr: 1.0e-3}}
logging: {console: plain}
)";

// "a+b=" answered with the sum (chosen) or a number 1 to 3 off it (rejected).
// The training steps' rows (the first row is the evaluation before training, step 0).
std::vector<nlohmann::json> step_rows(const std::string& path) {
  std::vector<nlohmann::json> rows;
  for (const nlohmann::json& row : read_json_lines(path)) {
    if (row.contains("rm/loss")) rows.push_back(row);
  }
  return rows;
}

std::string sum_pairs(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string text;
  for (int i = 0; i < count; ++i) {
    const int a = static_cast<int>(rng() % 10), b = static_cast<int>(rng() % 10), sum = a + b;
    int wrong = sum + static_cast<int>(rng() % 3) + 1;
    if (rng() % 2 == 0 && sum >= 3) wrong = sum - static_cast<int>(rng() % 3) - 1;
    text += nlohmann::json{{"prompt", std::to_string(a) + "+" + std::to_string(b) + "="},
                           {"chosen", std::to_string(sum)},
                           {"rejected", std::to_string(wrong)}}
                .dump() +
            "\n";
  }
  return text;
}

struct Setup {
  TempDir dir;
  Setup() {
    write_file_atomic(dir.path() + "/pairs.jsonl", sum_pairs(2000, 7));
    write_file_atomic(dir.path() + "/rm.yaml", kConfig);
  }
  ExitStatus train(const std::string& run, const std::vector<std::string>& sets, const std::string& out) const {
    std::vector<std::string> args = {"train-rm", dir.path() + "/rm.yaml", "--run-dir", dir.path() + "/" + run};
    for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
    return run_tandem(args, dir.path() + "/" + out, 300);
  }
};

}  // namespace

TEST_CASE("train-rm learns correct sums over wrong ones and exports a sequence classifier") {
  Setup s;
  REQUIRE(s.train("run", {}, "out.txt").exit_code == 0);
  const std::string run = s.dir.path() + "/run";
  const std::vector<nlohmann::json> all = read_json_lines(run + "/metrics.jsonl");
  REQUIRE(all.front().at("step") == 0);  // eval_before_train: the untrained head scores every answer 0
  CHECK(all.front().at("val/rm_accuracy") == 0);
  // Scores exactly 0 (the head is 0): the float64 loss is log1p(e^0) = log 2 to an ulp.
  CHECK(all.front().at("val/rm_loss").get<double>() == doctest::Approx(std::log(2.0)).epsilon(1e-9));
  const std::vector<nlohmann::json> rows = step_rows(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 240);
  // The head starts at 0, so every pair's loss is float32 log 2 (one rounding, u); a mean of
  // 32 of them adds at most 31 roundings of the running sum and one of the division: 33 u
  // relative in any order of addition (u = 2^-24).
  const double u = 1.0 / (1 << 24);
  CHECK(rows.front().at("rm/loss").get<double>() == doctest::Approx(std::log(2.0)).epsilon(33 * u));
  // The held-out 10% (200 pairs) after 240 steps: at least 90% ranked right, the issue's
  // bar (chance is 50%). Measured 0.96 on a 2-core EPYC on pairs like these.
  const nlohmann::json& last = rows.back();
  REQUIRE(last.contains("val/rm_accuracy"));
  CHECK(last.at("val/pairs").get<double>() == 200);
  CHECK(last.at("val/rm_accuracy").get<double>() >= 0.9);
  CHECK(last.at("val/rm_loss").get<double>() < 0.35);

  // A Hugging Face *ForSequenceClassification directory: score.weight [1, hidden], no LM head.
  const nlohmann::json config = nlohmann::json::parse(read_text(run + "/reward_model/config.json"));
  CHECK(config.at("architectures") == nlohmann::json::array({"Qwen3ForSequenceClassification"}));
  CHECK(config.at("num_labels") == 1);
  CHECK(config.at("id2label").size() == 1);
  const auto weights = SafetensorsFile::open(run + "/reward_model/model.safetensors");
  REQUIRE(weights->contains("score.weight"));
  CHECK(weights->get("score.weight").shape == std::vector<int64_t>{1, config.at("hidden_size").get<int64_t>()});
  CHECK_FALSE(weights->contains("lm_head.weight"));
  CHECK(weights->contains("model.embed_tokens.weight"));
  CHECK(std::filesystem::exists(run + "/reward_model/tokenizer.json"));

  // Served as a run's reward: GRPO on the same sums, scored by the reward model alone.
  const std::string grpo = s.dir.path() + "/grpo.yaml";
  write_file_atomic(grpo, "experiment: {name: rm-grpo, seed: 2, steps: 3, checkpoint_every: 0}\n"
                          "model: {path: \"builtin:tiny\"}\n"
                          "data: {train: \"builtin:addition1\", batch_size: 4}\n"
                          "algorithm: {group_size: 4}\n"
                          "rollout: {workers: 1, max_new_tokens: 3, kv_cache_mb: 8}\n"
                          "learner: {workers: 1, micro_batch_size: 16}\n"
                          "reward: [{model: " + run + "/reward_model, batch_size: 8}]\n"
                          "logging: {console: plain}\n");
  const std::string out = s.dir.path() + "/grpo.txt";
  REQUIRE(run_tandem({"run", grpo, "--run-dir", s.dir.path() + "/grpo"}, out, 300).exit_code == 0);
  for (const nlohmann::json& row : read_json_lines(s.dir.path() + "/grpo/metrics.jsonl")) {
    INFO(row.dump());
    CHECK(std::isfinite(row.at("reward/reward_model").get<double>()));
    CHECK(row.at("reward/std").get<double>() > 0);  // scores differ between samples
    CHECK(row.at("reward/fallbacks").get<double>() == 0);
  }
  // A policy whose tokenizer differs (tiny-tools has four more special tokens) is refused
  // before anything starts: the reward model would read its ids as other tokens.
  REQUIRE(run_tandem({"validate", grpo, "--set", "model.path=builtin:tiny-tools"}, out, 120).exit_code == 2);
  CHECK(read_text(out).find("reward.0.model: the reward model") != std::string::npos);
  CHECK(read_text(out).find("would read the policy's tokens as other ones") != std::string::npos);
}

TEST_CASE("train-rm resumes from its checkpoint to the same numbers; bad input stops it before it starts") {
  Setup s;
  REQUIRE(s.train("whole", {"experiment.steps=6", "experiment.checkpoint_every=3", "experiment.eval_every=3"},
                  "whole.txt")
              .exit_code == 0);
  REQUIRE(s.train("half", {"experiment.steps=3", "experiment.checkpoint_every=3", "experiment.eval_every=3"}, "half.txt")
              .exit_code == 0);
  const std::string half = s.dir.path() + "/half";
  REQUIRE(run_tandem({"resume", half, "--set", "experiment.steps=6"}, s.dir.path() + "/resume.txt", 300).exit_code == 0);
  const std::vector<nlohmann::json> whole = step_rows(s.dir.path() + "/whole/metrics.jsonl");
  const std::vector<nlohmann::json> resumed = step_rows(half + "/metrics.jsonl");
  REQUIRE(whole.size() == 6);
  REQUIRE(resumed.size() == 6);
  for (size_t i = 3; i < 6; ++i) {
    INFO("step " << i + 1);
    for (const char* key : {"rm/loss", "rm/accuracy", "rm/grad_norm"}) CHECK(resumed[i].at(key) == whole[i].at(key));
  }
  CHECK(resumed[5].at("val/rm_loss") == whole[5].at("val/rm_loss"));

  // Refused with exit 2 and where: no pairs, a bad row, a batch too small for the ranks.
  write_file_atomic(s.dir.path() + "/bad.jsonl", "{\"prompt\": \"1+1=\", \"chosen\": \"2\"}\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"reward_model.train=''", "experiment.eval_every=0"}, "reward_model.train: tandem train-rm needs preference pairs"},
      {{"reward_model.train=" + s.dir.path() + "/bad.jsonl"}, "bad.jsonl:1: no \"rejected\" field"},
      {{"learner.workers=2", "reward_model.batch_size=1"}, "reward_model.batch_size 1 gives some of the 2 learner ranks"},
      {{"sft.steps=3"}, "sft.steps: tandem train-rm trains a reward model"},
  };
  for (const auto& [sets, expected] : refused) {
    INFO(sets[0]);
    CHECK(s.train("refused", sets, "refused.txt").exit_code == 2);
    CHECK(read_text(s.dir.path() + "/refused.txt").find(expected) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(s.dir.path() + "/refused"));
    std::filesystem::remove(s.dir.path() + "/refused.txt");
  }
}

TEST_CASE("train-rm: a learner killed mid-run comes back from its snapshot in memory, with the same numbers") {
  Setup s;
  const std::vector<std::string> two = {"learner.workers=2", "experiment.steps=40", "experiment.checkpoint_every=20",
                                        "experiment.eval_every=10", "launcher.max_restarts=2"};
  REQUIRE(s.train("reference", two, "reference.txt").exit_code == 0);
  std::vector<std::string> args = {TANDEM_BINARY, "train-rm", s.dir.path() + "/rm.yaml", "--run-dir",
                                   s.dir.path() + "/run"};
  for (const std::string& set : two) args.insert(args.end(), {"--set", set});
  ChildProcess controller = ChildProcess::spawn(args, {s.dir.path() + "/out.txt", false});
  // Rank 1's pid from the run's status.json once step 12 is done (past step 10's snapshot).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int pid = 0;
  while (pid == 0) {
    REQUIRE_MESSAGE(controller.running(), read_text(s.dir.path() + "/out.txt"));
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (read_text(s.dir.path() + "/run/metrics.jsonl").find("{\"step\":12,") == std::string::npos) continue;
    const nlohmann::json status = nlohmann::json::parse(read_text(s.dir.path() + "/run/status.json"), nullptr, false);
    if (!status.is_object()) continue;
    for (const auto& worker : status.at("workers")) {
      if (worker.at("name") == "colocated-1") pid = worker.at("pid").get<int>();
    }
  }
  REQUIRE(::kill(pid, SIGKILL) == 0);
  const auto exit = controller.wait_for(120);
  const std::string out = read_text(s.dir.path() + "/out.txt");
  INFO(out);
  REQUIRE(exit.has_value());
  REQUIRE(exit->exit_code == 0);
  CHECK(out.find("from their snapshot in memory") != std::string::npos);
  const std::vector<nlohmann::json> expected = read_json_lines(s.dir.path() + "/reference/metrics.jsonl");
  const std::vector<nlohmann::json> got = read_json_lines(s.dir.path() + "/run/metrics.jsonl");
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    for (const auto& [key, value] : expected[i].items()) {
      if (key.rfind("time/", 0) == 0 || key.rfind("perf/", 0) == 0) continue;
      INFO("row " << i << " " << key);
      REQUIRE(got[i].contains(key));
      CHECK(got[i].at(key) == value);
    }
  }
  CHECK(got.back().at("perf/worker_restarts").get<double>() == 1);
}
