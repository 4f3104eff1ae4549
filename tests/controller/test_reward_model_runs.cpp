// `tandem train-rm` end to end on real learner workers: a reward model learns a checkable
// preference (correct sums over wrong ones), exports as a Hugging Face sequence classifier,
// serves as a run's only reward and so raises the policy's true accuracy (the shipped
// configs/rlhf_*.yaml pipeline), resumes from a checkpoint to the same numbers, and bad
// input stops it before it starts.
// The Bradley-Terry loss and the learner's step are checked against float64 and across
// ranks in tests/learner/test_preference_loss.cpp and test_trainer.cpp.
#include "actor/model_weights.h"
#include "actor/tokenizer.h"
#include "core/safetensors.h"
#include "tests/support/forward_tolerance.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

using namespace tandem;
using namespace tandem::testing;

namespace {

const char* kConfig = R"(experiment: {name: rm, seed: 1, steps: 240, checkpoint_every: 120, eval_every: 80}
model: {path: "builtin:tiny"}
reward_model: {train: "builtin:addition1_pairs", batch_size: 32, max_length: 64}
learner: {workers: 1, micro_batch_size: 16, optimizer: {lr: 1.0e-3}}
logging: {console: plain}
)";

// The training steps' rows (the first row is the evaluation before training, step 0).
std::vector<nlohmann::json> step_rows(const std::string& path) {
  std::vector<nlohmann::json> rows;
  for (const nlohmann::json& row : read_json_lines(path)) {
    if (row.contains("rm/loss")) rows.push_back(row);
  }
  return rows;
}

struct Setup {
  TempDir dir;
  Setup() {
    write_file_atomic(dir.path() + "/rm.yaml", kConfig);
  }
  ExitStatus train(const std::string& run, const std::vector<std::string>& sets, const std::string& out) const {
    std::vector<std::string> args = {"train-rm", dir.path() + "/rm.yaml", "--run-dir", dir.path() + "/" + run};
    for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
    return run_tandem(args, dir.path() + "/" + out, 300);
  }
};

}  // namespace

// Two runs' metrics rows: every number but timings and performance counters equal.
void check_same_numbers(const std::vector<nlohmann::json>& expected, const std::vector<nlohmann::json>& got) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    for (const auto& [key, value] : expected[i].items()) {
      if (key.rfind("time/", 0) == 0 || key.rfind("perf/", 0) == 0) continue;
      INFO("row " << i << " " << key);
      REQUIRE(got[i].contains(key));
      CHECK(got[i].at(key) == value);
    }
  }
}

// Mean of `key` over rows [begin, end) of a run's metrics (steps begin+1 .. end).
double mean_of(const std::vector<nlohmann::json>& rows, const char* key, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += rows.at(i).at(key).get<double>();
  return sum / static_cast<double>(end - begin);
}

TEST_CASE("the RLHF pipeline as shipped: train-rm learns correct sums over wrong ones, exports a sequence "
          "classifier, and GRPO on its scores alone raises the true accuracy") {
  TempDir dir;
  const std::string configs = std::string(TANDEM_SOURCE_DIR) + "/configs";
  const std::string run = dir.path() + "/rm";
  REQUIRE(run_tandem({"train-rm", configs + "/rlhf_reward_model.yaml", "--run-dir", run, "--set",
                      "logging.console=plain"},
                     dir.path() + "/rm.txt", 300)
              .exit_code == 0);
  const std::vector<nlohmann::json> all = read_json_lines(run + "/metrics.jsonl");
  REQUIRE(all.front().at("step") == 0);  // eval_before_train: the untrained head scores every answer 0
  CHECK(all.front().at("val/rm_accuracy") == 0);
  CHECK(all.front().at("val/rm_score_std") == 0);
  // Scores exactly 0 (the head is 0): the float64 loss is log1p(e^0) = log 2 to an ulp.
  CHECK(all.front().at("val/rm_loss").get<double>() == doctest::Approx(std::log(2.0)).epsilon(1e-9));
  const std::vector<nlohmann::json> rows = step_rows(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 1920);
  // The head starts at 0, so every pair's loss is float32 log 2 (one rounding, u); a mean of
  // 32 of them adds at most 31 roundings of the running sum and one of the division: 33 u
  // relative in any order of addition (u = 2^-24).
  const double u = 1.0 / (1 << 24);
  CHECK(rows.front().at("rm/loss").get<double>() == doctest::Approx(std::log(2.0)).epsilon(33 * u));
  // The held-out 10% (260 pairs) after 1920 steps: at least 90% ranked right, the issue's
  // bar (chance is 50%). Measured 0.98 to 0.99 over four seeds on a 2-core EPYC.
  const nlohmann::json& last = rows.back();
  REQUIRE(last.contains("val/rm_accuracy"));
  CHECK(last.at("val/pairs").get<double>() == 260);
  CHECK(last.at("val/rm_accuracy").get<double>() >= 0.9);
  CHECK(last.at("val/rm_loss").get<double>() < 0.35);

  // A Hugging Face *ForSequenceClassification directory: score.weight [1, hidden], no LM head,
  // and the final model's score statistics over the validation answers (the last
  // evaluation's, same weights and the same forward: equal but for the JSON round trip).
  const std::string model = run + "/reward_model";
  const nlohmann::json config = nlohmann::json::parse(read_text(model + "/config.json"));
  CHECK(config.at("architectures") == nlohmann::json::array({"Qwen3ForSequenceClassification"}));
  CHECK(config.at("num_labels") == 1);
  CHECK(config.at("id2label").size() == 1);
  // Both are one float64 computation (score_statistics over the same scores) printed as JSON
  // with round-trip digits: equal; 1e-12 (~4,500 float64 ulps) leaves room only for printing.
  CHECK(config.at("mean").get<double>() == doctest::Approx(last.at("val/rm_score_mean").get<double>()).epsilon(1e-12));
  CHECK(config.at("std").get<double>() == doctest::Approx(last.at("val/rm_score_std").get<double>()).epsilon(1e-12));
  CHECK(config.at("std").get<double>() > 0);
  const auto weights = SafetensorsFile::open(model + "/model.safetensors");
  REQUIRE(weights->contains("score.weight"));
  CHECK(weights->get("score.weight").shape == std::vector<int64_t>{1, config.at("hidden_size").get<int64_t>()});
  CHECK_FALSE(weights->contains("lm_head.weight"));
  CHECK(weights->contains("model.embed_tokens.weight"));
  CHECK(std::filesystem::exists(model + "/tokenizer.json"));

  // Served as shipped (normalize, missing_eos_penalty 2) and plain, one step on the same
  // seed from the untrained policy (no warm-up: many samples run to max_new_tokens without
  // an end of sequence): the same samples, so each shaped score is (raw - mean) / std,
  // less 2 where the sample did not end, to float64 rounding.
  const std::string pipeline = configs + "/rlhf_pipeline.yaml";
  const std::vector<std::string> one_step = {"--set", "reward.0.model=" + model, "--set", "experiment.steps=1",
                                             "--set", "sft.steps=0", "--set", "logging.console=plain",
                                             "--set", "logging.samples_per_step=512"};  // all of them
  auto run_pipeline = [&](const std::string& name, std::vector<std::string> sets) {
    std::vector<std::string> args = {"run", pipeline, "--run-dir", dir.path() + "/" + name};
    args.insert(args.end(), sets.begin(), sets.end());
    const std::string out = dir.path() + "/" + name + ".txt";
    const ExitStatus status = run_tandem(args, out, 300);
    INFO(read_text(out));
    REQUIRE(status.exit_code == 0);
    return read_json_lines(dir.path() + "/" + name + "/metrics.jsonl");
  };
  std::vector<std::string> plain_sets = one_step;
  plain_sets.insert(plain_sets.end(), {"--set", "reward.0.normalize=false", "--set", "reward.0.missing_eos_penalty=0"});
  const std::vector<nlohmann::json> plain = run_pipeline("plain", plain_sets);
  const std::vector<nlohmann::json> shaped = run_pipeline("shaped", one_step);
  REQUIRE(plain.size() == 1);
  REQUIRE(shaped.size() == 1);
  CHECK(plain[0].at("reward/std").get<double>() > 0);  // scores differ between samples
  const std::vector<nlohmann::json> plain_samples = read_json_lines(dir.path() + "/plain/samples.jsonl");
  const std::vector<nlohmann::json> shaped_samples = read_json_lines(dir.path() + "/shaped/samples.jsonl");
  REQUIRE(plain_samples.size() == 512);
  REQUIRE(shaped_samples.size() == plain_samples.size());
  // Two float32 forwards' rounding bound of a raw score (tests/support/forward_tolerance.h,
  // derived from the model's path length and weights, not measured, so the same on Intel
  // and AMD: 1.6-2.7e-3 for this model and these samples, printed below). The controller scores samples in padded batches as they finish
  // (rollout.score_while_generating), so which samples share a forward, and the padded
  // length, depend on when each rollout worker finished them: the same sample's raw score
  // can differ between two runs by the products' other blocking (seen: 1 sample in 512).
  ModelConfig rm_config = read_sequence_classifier_config(model);
  const ModelWeights rm_weights = load_model_weights(model, rm_config);
  const std::unique_ptr<Tokenizer> rm_tokenizer = load_tokenizer(model);
  int64_t longest = 0;  // tokens the reward model reads of a sample: its prompt's and its response's
  for (const nlohmann::json& sample : plain_samples) {
    const int64_t prompt = static_cast<int64_t>(rm_tokenizer->encode(sample.at("prompt").get<std::string>()).size());
    longest = std::max(longest, prompt + sample.at("response_tokens").get<int64_t>());
  }
  const double bound = 2 * logit_tolerance(rm_config, rm_weights, longest);
  // The shaped scores are float64 (s - mean) / std - penalty: a raw score s within `bound`
  // of the plain run's moves its shaped score by bound / std, and the step mean (of 512)
  // by at most that too. The rest is float64 rounding, recomputed here from the same inputs
  // (JSON round-trips them exactly) in the same or another order: a few roundings per
  // sample, and for the step mean a sum of 512 terms of |x| < ~20, under 512 * 20 * 2^-53 ~
  // 1e-12; 1e-9 * (1 + |x|) allows a thousand times that.
  const double mean = config.at("mean").get<double>(), std = config.at("std").get<double>();
  auto within = [&](double got, double want) {
    return std::abs(got - want) <= bound / std + 1e-9 * (1 + std::abs(want));
  };
  const double unended = shaped[0].at("reward/reward_model/missing_eos").get<double>();
  CHECK(unended > 0);
  CHECK(unended == plain[0].at("reward/reward_model/missing_eos").get<double>());
  CHECK(within(shaped[0].at("reward/reward_model").get<double>(),
               (plain[0].at("reward/reward_model").get<double>() - mean) / std - 2 * unended));
  for (size_t i = 0; i < plain_samples.size(); ++i) {
    INFO(shaped_samples[i].dump());
    REQUIRE(shaped_samples[i].at("response") == plain_samples[i].at("response"));
    const bool ended = shaped_samples[i].at("finish_reason") == "stop";
    CHECK(shaped_samples[i].at("reward_parts").at("reward_model/missing_eos") == (ended ? 0.0 : 1.0));
    CHECK(within(shaped_samples[i].at("rewards").at("reward_model").get<double>(),
                 (plain_samples[i].at("rewards").at("reward_model").get<double>() - mean) / std - (ended ? 0.0 : 2.0)));
  }

  // Served by two reward-model worker processes (the rollout engine's CPU backend with
  // the classifier's head, prefill only) instead of the controller's libtorch forward: the
  // same samples, each raw score within `bound` above of the plain run's. The issue's 1e-5 is below what
  // float32 promises here: scores of magnitude ~10 have an ulp of 9.5e-7, and two
  // implementations' sums in different orders measured up to 4.1e-5 apart (4e-6 relative).
  std::vector<std::string> served_sets = plain_sets;
  served_sets.insert(served_sets.end(), {"--set", "reward.0.workers=2"});
  run_pipeline("served", served_sets);
  const std::vector<nlohmann::json> served_samples = read_json_lines(dir.path() + "/served/samples.jsonl");
  REQUIRE(served_samples.size() == 512);
  MESSAGE("served vs in-controller scores: bound " << bound);
  double worst = 0;
  for (size_t i = 0; i < plain_samples.size(); ++i) {
    INFO(served_samples[i].dump());
    REQUIRE(served_samples[i].at("response") == plain_samples[i].at("response"));
    const double got = served_samples[i].at("rewards").at("reward_model").get<double>();
    const double want = plain_samples[i].at("rewards").at("reward_model").get<double>();
    REQUIRE(std::isfinite(got));
    CHECK(std::abs(got - want) <= bound);
    worst = std::max(worst, std::abs(got - want));
  }
  MESSAGE("served vs in-controller scores: largest difference " << worst);
  CHECK(read_text(dir.path() + "/served/logs/controller-0.log").find("reward_model-1 holds") != std::string::npos);

  // Its worker killed (SIGKILL) after the first step: restarted, loaded again, and the run
  // goes on to the numbers of a run without the kill (the CPU backend scores each sequence
  // the same whatever else shares its pass).
  std::vector<std::string> three_steps = plain_sets;
  three_steps.insert(three_steps.end(), {"--set", "experiment.steps=3", "--set", "reward.0.workers=1"});
  const std::vector<nlohmann::json> unkilled = run_pipeline("unkilled", three_steps);
  std::vector<std::string> killed_args = {TANDEM_BINARY, "run", pipeline, "--run-dir", dir.path() + "/killed"};
  killed_args.insert(killed_args.end(), three_steps.begin(), three_steps.end());
  ChildProcess controller = ChildProcess::spawn(killed_args, {dir.path() + "/killed.txt", false});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_text(dir.path() + "/killed/metrics.jsonl").find("{\"step\":1,") == std::string::npos) {
    REQUIRE_MESSAGE(controller.running(), read_text(dir.path() + "/killed.txt"));
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int scorer = find_worker_pid(controller.pid(), "reward_model", 0);
  REQUIRE(scorer != 0);
  REQUIRE(::kill(scorer, SIGKILL) == 0);
  const auto exit = controller.wait_for(120);
  INFO(read_text(dir.path() + "/killed.txt"));
  REQUIRE(exit.has_value());
  REQUIRE(exit->exit_code == 0);
  CHECK(read_text(dir.path() + "/killed/logs/controller-0.log").find("restarting it and scoring its part again") !=
        std::string::npos);
  check_same_numbers(unkilled, read_json_lines(dir.path() + "/killed/metrics.jsonl"));

  // The whole pipeline config (sft warm-up, then GRPO) with the reward model as its only
  // reward: math_answer at weight 0 adds nothing to the reward but reports the truth.
  const std::vector<nlohmann::json> grpo =
      run_pipeline("grpo", {"--set", "reward.0.model=" + model, "--set", "logging.console=plain"});
  REQUIRE(grpo.size() == 150);
  for (const nlohmann::json& row : grpo) {
    INFO(row.dump());
    CHECK(row.at("reward/math_answer").get<double>() == 0);
    CHECK(row.at("reward/mean").get<double>() == doctest::Approx(row.at("reward/reward_model").get<double>()));
    CHECK(row.at("reward/fallbacks").get<double>() == 0);
  }
  // True accuracy, first 10 steps (5,120 samples) against the last 10: math_answer itself as
  // the reward lifts it by ~0.58 (the quickstart, bench/RESULTS.md); the reward model's
  // scores, a proxy with its own mistakes, lifted it by 0.18 to 0.35 over four seeds of the
  // reward model and the run (bench/RESULTS.md); another CPU's kernels are in effect
  // another seed, so the bar sits well below that: 0.05 is still a rise no sampling noise
  // makes (a 10-step mean of 5,120 samples has a standard error of about 0.006).
  const double before = mean_of(grpo, "reward/math_answer/correct", 0, 10);
  const double after = mean_of(grpo, "reward/math_answer/correct", 140, 150);
  MESSAGE("true accuracy with the reward model's reward: " << before << " -> " << after);
  CHECK(after >= before + 0.05);

  // Refused before anything starts: a policy whose tokenizer differs (tiny-tools has four
  // more special tokens: the reward model would read its ids as other tokens); normalize
  // on a model without statistics; normalize on a reward that is not a model.
  const std::string bare = dir.path() + "/bare";
  std::filesystem::copy(model, bare, std::filesystem::copy_options::recursive);
  nlohmann::json stripped = config;
  stripped.erase("mean");
  write_file_atomic(bare + "/config.json", stripped.dump());
  const std::string out = dir.path() + "/validate.txt";
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"reward.0.model=" + model, "model.path=builtin:tiny-tools"}, "would read the policy's tokens as other ones"},
      {{"reward.0.model=" + dir.path() + "/none", "reward.0.weight=1"}, "none: no such directory (a reward model is"},
      {{"reward.0.model=" + bare, "reward.0.normalize=true"}, "has no number \"mean\": normalize needs"},
      {{"reward.0.model=" + model, "reward.1.normalize=true"}, "reward.1.normalize: only model rewards read normalize"},
      {{"reward.0.model=" + model, "reward.0.device=cuda"}, "reward.0.device: \"cuda\" needs workers >= 1"},
      {{"reward.0.model=" + model, "reward.0.workers=1", "launcher.kind=external", "launcher.port=29555"},
       "reward-model workers are started by the local and slurm launchers"},
  };
  for (const auto& [sets, expected] : refused) {
    INFO(sets[1]);
    std::vector<std::string> args = {"validate", pipeline};
    for (const std::string& set : sets) args.insert(args.end(), {"--set", set});
    CHECK(run_tandem(args, out, 120).exit_code == 2);
    CHECK(read_text(out).find(expected) != std::string::npos);
  }
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
  // A finished train-rm run says where its reward model is (not a policy).
  REQUIRE(run_tandem({"resume", s.dir.path() + "/whole"}, s.dir.path() + "/finished.txt", 120).exit_code == 0);
  CHECK(read_text(s.dir.path() + "/finished.txt").find("the reward model is in " + s.dir.path() + "/whole/reward_model") !=
        std::string::npos);

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
  check_same_numbers(expected, got);
  CHECK(got.back().at("perf/worker_restarts").get<double>() == 1);
}
