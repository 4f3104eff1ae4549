// Python rewards (rewards/python/pool.h): verl-signature functions run in
// embedded-CPython worker processes (`tandem reward-worker`), in parallel, with
// tracebacks, timeouts that replace a stuck worker, crashes survived, and the batched
// form. Reward files: tests/python/.
#include "rewards/python/pool.h"
#include "core/error.h"
#include "core/files.h"

#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

using namespace tandem;
using DataRow = std::map<std::string, std::string>;

namespace {

const std::string kCases = std::string(TANDEM_SOURCE_DIR) + "/tests/python/scoring_cases.py";

RewardConfig python_reward(const std::string& function, int64_t workers = 2) {
  RewardConfig c;
  c.python = kCases;
  c.function = function;
  c.name = function;
  c.workers = workers;
  return c;
}

// Samples with these responses, each row answering "42" unless told otherwise.
struct Samples {
  explicit Samples(std::vector<std::string> responses, DataRow row = {{"answer", "42"}})
      : responses_(std::move(responses)), row_(std::move(row)) {
    for (const std::string& r : responses_) inputs.push_back({prompt_, r, ids_, row_});
  }
  std::vector<RewardInput> inputs;

 private:
  std::vector<std::string> responses_;
  DataRow row_;
  std::string prompt_ = "What is 6*7?";
  std::vector<int32_t> ids_ = {1, 2};
};

double part(const RewardResult& r, const std::string& name) {
  for (const auto& [n, v] : r.parts) {
    if (n == name) return v;
  }
  FAIL("no part ", name);
  return 0;
}

}  // namespace

TEST_CASE("a verl compute_score scores every sample, in order, on several worker processes") {
  PythonRewardPool pool(python_reward("compute_score"), 0, TANDEM_BINARY);
  std::vector<std::string> responses;
  for (int i = 0; i < 40; ++i) responses.push_back(i % 3 == 0 ? "42" : std::to_string(i));
  Samples samples(responses);
  const std::vector<RewardOutcome> outcomes = pool.score(samples.inputs);
  REQUIRE(outcomes.size() == 40);
  for (int i = 0; i < 40; ++i) {
    INFO("sample ", i);
    CHECK(outcomes[i].error.empty());
    CHECK(outcomes[i].result.score == (i % 3 == 0 ? 1.0 : 0.0));
  }
  CHECK(pool.score({}).empty());
}

TEST_CASE("dict results become parts (numbers, bools, numpy scalars); strings are left out") {
  PythonRewardPool pool(python_reward("with_parts", 2), 0, TANDEM_BINARY);
  Samples samples({"42", "abc", "x", "yy", "42", "zzz", "w", "42"});
  const std::vector<RewardOutcome> outcomes = pool.score(samples.inputs);
  std::set<double> pids;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    REQUIRE(outcomes[i].error.empty());
    CHECK(outcomes[i].result.score == static_cast<double>(samples.inputs[i].response.size()));
    CHECK(part(outcomes[i].result, "acc") == (samples.inputs[i].response == "42" ? 1.0 : 0.0));
    CHECK(part(outcomes[i].result, "numpy_part") == 0.5);
    for (const auto& [name, value] : outcomes[i].result.parts) CHECK(name != "pred");
    pids.insert(part(outcomes[i].result, "pid"));
  }
  CHECK(pids.size() == 2);  // both workers scored
}

TEST_CASE("the arguments: data_source text, ground_truth None when the row has no answer, extra_info a dict") {
  PythonRewardPool pool(python_reward("echo_inputs", 1), 0, TANDEM_BINARY);
  Samples samples({"r"}, DataRow{{"data_source", "gsm8k"}, {"extra_info", "{\"index\":7,\"split\":\"train\"}"}});
  const RewardOutcome outcome = pool.score(samples.inputs).at(0);
  REQUIRE(outcome.error.empty());
  CHECK(outcome.result.score == 3.0);
  CHECK(part(outcome.result, "source_is_str") == 1.0);
  CHECK(part(outcome.result, "truth_is_none") == 1.0);
  CHECK(part(outcome.result, "extra_is_dict") == 1.0);
}

TEST_CASE("multi-turn: the conversation and stop reason join extra_info, the answer is the last assistant message") {
  PythonRewardPool pool(python_reward("echo_conversation", 1), 0, TANDEM_BINARY);
  const std::string conversation =
      R"({"messages": [{"role": "assistant", "content": "<tool_call>...</tool_call>"},)"
      R"( {"role": "tool", "content": "42"}, {"role": "assistant", "content": "It is 42"}], "stop_reason": "max_turns"})";
  const DataRow row{{"extra_info", "{\"index\":7}"}};
  const std::string prompt = "What is 6*7?", response = "It is 42";
  const std::vector<int32_t> ids = {1, 2};
  const RewardOutcome outcome = pool.score({RewardInput{prompt, response, ids, row, &conversation}}).at(0);
  REQUIRE_MESSAGE(outcome.error.empty(), outcome.error);
  CHECK(outcome.result.score == 3.0);
  for (const char* name : {"row_key_kept", "stop_is_max_turns", "tool_said_42", "answer_is_last"}) {
    INFO(name);
    CHECK(part(outcome.result, name) == 1.0);
  }
}

TEST_CASE("an exception is that sample's error, with the traceback; the others are scored") {
  RewardConfig config = python_reward("fails_on_boom");
  config.on_error = "fallback";  // with fail, score() returns at the first error
  PythonRewardPool pool(config, 0, TANDEM_BINARY);
  Samples samples({"fine", "boom!", "fine too"});
  const std::vector<RewardOutcome> outcomes = pool.score(samples.inputs);
  CHECK(outcomes[0].error.empty());
  CHECK(outcomes[2].error.empty());
  CHECK(outcomes[1].error.find("Traceback (most recent call last)") != std::string::npos);
  CHECK(outcomes[1].error.find("scoring_cases.py") != std::string::npos);
  CHECK(outcomes[1].error.find("in fails_on_boom") != std::string::npos);
  CHECK(outcomes[1].error.find("ValueError: cannot score boom!") != std::string::npos);
}

TEST_CASE("results that are not scores are errors saying what came back") {
  PythonRewardPool text(python_reward("returns_text", 1), 0, TANDEM_BINARY);
  Samples samples({"a"});
  CHECK(text.score(samples.inputs).at(0).error.find("returned '1.0' (a str)") != std::string::npos);
  PythonRewardPool nan(python_reward("returns_nan", 1), 0, TANDEM_BINARY);
  CHECK(nan.score(samples.inputs).at(0).error.find("non-finite") != std::string::npos);
  PythonRewardPool prints(python_reward("prints_a_lot", 1), 0, TANDEM_BINARY);
  TempDir dir;
  prints.set_log_path(dir.path() + "/reward.log");
  CHECK(prints.score(samples.inputs).at(0).result.score == 5.0);  // print() did not corrupt the reply
  CHECK(read_file(dir.path() + "/reward.log").value_or("").find("goes to the worker's log") != std::string::npos);
}

TEST_CASE("a call past timeout_s kills and replaces its worker; the sample gets a timeout error") {
  RewardConfig config = python_reward("sleeps_on_slow", 2);
  config.timeout_s = 1.0;
  config.on_error = "fallback";
  PythonRewardPool pool(config, 3, TANDEM_BINARY);
  Samples samples({"a", "slow", "b", "c", "d", "e"});
  const std::vector<RewardOutcome> outcomes = pool.score(samples.inputs);
  CHECK(outcomes[1].error.find("timed out after 1 s (reward.3.timeout_s)") != std::string::npos);
  for (size_t i : {0, 2, 3, 4, 5}) {
    INFO("sample ", i);
    CHECK(outcomes[i].error.empty());
    CHECK(outcomes[i].result.score == 2.0);
  }
  CHECK(pool.timeouts() == 1);
  Samples again({"x", "y"});  // the replacement works
  for (const RewardOutcome& o : pool.score(again.inputs)) CHECK(o.result.score == 2.0);
}

TEST_CASE("a worker that dies is replaced; its sample's error says how it ended") {
  RewardConfig config = python_reward("dies_on_crash", 1);
  config.on_error = "fallback";
  PythonRewardPool pool(config, 0, TANDEM_BINARY);
  Samples samples({"a", "crash", "b"});
  const std::vector<RewardOutcome> outcomes = pool.score(samples.inputs);
  CHECK(outcomes[0].result.score == 4.0);
  CHECK(outcomes[1].error.find("exited with status 3") != std::string::npos);
  CHECK(outcomes[2].error.empty());
  CHECK(outcomes[2].result.score == 4.0);
}

TEST_CASE("the batched form takes lists and returns one score per sample") {
  RewardConfig config = python_reward("batched_lengths", 2);
  config.batched = true;
  PythonRewardPool pool(config, 0, TANDEM_BINARY);
  Samples samples({"a", "bb", "ccc", "dddd", "eeeee"});
  const std::vector<RewardOutcome> outcomes = pool.score(samples.inputs);
  for (size_t i = 0; i < outcomes.size(); ++i) CHECK(outcomes[i].result.score == static_cast<double>(i + 1));
  config.function = "batched_wrong_length";
  config.on_error = "fallback";  // every chunk answered (with fail, score() returns at the first error)
  PythonRewardPool wrong(config, 0, TANDEM_BINARY);
  for (const RewardOutcome& o : wrong.score(samples.inputs)) {
    CHECK(o.error.find("returned 1 values for") != std::string::npos);
  }
}

TEST_CASE("a file that does not import, or lacks the function, fails at start with Python's message") {
  RewardConfig broken = python_reward("compute_score", 1);
  broken.python = std::string(TANDEM_SOURCE_DIR) + "/tests/python/broken_import.py";
  CHECK_THROWS_WITH_AS(PythonRewardPool(broken, 2, TANDEM_BINARY),
                       doctest::Contains("ModuleNotFoundError: No module named 'this_module_does_not_exist_anywhere'"),
                       Error);
  CHECK_THROWS_WITH_AS(PythonRewardPool(python_reward("no_such_function", 1), 0, TANDEM_BINARY),
                       doctest::Contains("has no function no_such_function (its functions and classes: "), Error);
  CHECK_THROWS_WITH_AS(PythonRewardPool(python_reward("not_a_function", 1), 0, TANDEM_BINARY),
                       doctest::Contains("not_a_function is a int, not a function"), Error);
  RewardConfig missing = python_reward("compute_score", 1);
  missing.python = "/nonexistent/reward.py";
  CHECK_THROWS_AS(PythonRewardPool(missing, 0, TANDEM_BINARY), Error);
}

TEST_CASE("rewards are called by keyword as verl calls them: any parameter order, keyword-only, **kwargs") {
  // Before the fix the call was positional: solution_first got data_source as its
  // solution_str, scored 0 for every sample, and nothing said so.
  Samples samples({"42", "41", " 42 "}, {{"answer", "42"}, {"data_source", "openai/gsm8k"}});
  for (const char* function : {"solution_first", "keyword_only"}) {
    INFO(function);
    PythonRewardPool pool(python_reward(function, 1), 0, TANDEM_BINARY);
    const std::vector<RewardOutcome> outcomes = pool.score(samples.inputs);
    REQUIRE(outcomes.size() == 3);
    for (const RewardOutcome& o : outcomes) {
      INFO(o.error);
      REQUIRE(o.error.empty());
      CHECK(part(o.result, "source_ok") == 1.0);
    }
    CHECK(outcomes[0].result.score == 1.0);
    CHECK(outcomes[1].result.score == 0.0);
    CHECK(outcomes[2].result.score == 1.0);
  }
}

TEST_CASE("reward_kwargs reach the function as keyword arguments, typed as the YAML said") {
  RewardConfig config = python_reward("scaled", 1);
  config.reward_kwargs = R"({"scale": 2.5, "bonus": {"list": [1, "two"], "flag": true}})";
  PythonRewardPool pool(config, 0, TANDEM_BINARY);
  const std::vector<RewardOutcome> outcomes = pool.score(Samples({"42", "7"}).inputs);
  REQUIRE(outcomes[0].error.empty());
  CHECK(outcomes[0].result.score == 2.5);
  CHECK(outcomes[1].result.score == 0.0);
  CHECK(part(outcomes[0].result, "bonus_ok") == 1.0);

  RewardConfig batched = python_reward("batched_scaled", 1);
  batched.batched = true;
  batched.reward_kwargs = R"({"scale": 3})";
  PythonRewardPool batched_pool(batched, 0, TANDEM_BINARY);
  const std::vector<RewardOutcome> lengths = batched_pool.score(Samples({"a", "bb"}).inputs);
  CHECK(lengths[0].result.score == 3.0);
  CHECK(lengths[1].result.score == 6.0);
}

TEST_CASE("a signature that cannot take verl's keywords is refused at start, naming the parameter") {
  CHECK_THROWS_WITH_AS(PythonRewardPool(python_reward("wrong_names", 1), 0, TANDEM_BINARY),
                       doctest::Contains("wrong_names(response, answer) cannot be called as tandem (like verl) calls "
                                         "it, by keyword"),
                       Error);
  RewardConfig unknown = python_reward("compute_score", 1);
  unknown.reward_kwargs = R"({"scale": 2})";  // compute_score takes no `scale`
  CHECK_THROWS_WITH_AS(PythonRewardPool(unknown, 0, TANDEM_BINARY), doctest::Contains("'scale'"), Error);
  RewardConfig reserved = python_reward("solution_first", 1);
  reserved.reward_kwargs = R"({"ground_truth": "x"})";
  CHECK_THROWS_WITH_AS(PythonRewardPool(reserved, 0, TANDEM_BINARY),
                       doctest::Contains("reward_kwargs names ground_truth, which tandem passes itself"), Error);
}

TEST_CASE("a missing module says which Python is embedded, where it looks, and python.path adds a directory") {
  RewardConfig broken = python_reward("compute_score", 1);
  broken.python = std::string(TANDEM_SOURCE_DIR) + "/tests/python/broken_import.py";
  try {
    PythonRewardPool pool(broken, 0, TANDEM_BINARY);
    FAIL("the import succeeded");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("tandem runs rewards in its embedded Python 3.") != std::string::npos);
    CHECK(what.find("which imports from:") != std::string::npos);
    CHECK(what.find("python: {path: [DIR]}") != std::string::npos);
  }
  // The module in a directory of its own, named by python.path: the import works.
  TempDir site;
  write_file_atomic(site.path() + "/this_module_does_not_exist_anywhere.py", "VALUE = 1\n");
  PythonRewardPool pool(broken, 0, TANDEM_BINARY, {site.path()});
  CHECK(pool.score(Samples({"x"}).inputs)[0].error.empty());
}
