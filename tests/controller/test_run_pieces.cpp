// The training loop's pieces that need no worker: datasets and their order, the built-in
// rewards (math_answer, format, length_penalty), the shared-memory weight transport.
#include "controller/data/dataset.h"
#include "controller/run/metrics_writer.h"
#include "core/error.h"
#include "core/files.h"
#include "rewards/registry.h"
#include "rewards/builtin.h"
#include "weight_sync/shm.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <fcntl.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <set>

using namespace tandem;

TEST_CASE("JSONL datasets keep every field; bad lines are named by file and line") {
  TempDir dir;
  const std::string path = dir.path() + "/d.jsonl";
  write_file_atomic(path, "{\"q\": \"1+2=\", \"answer\": 3, \"tags\": [1]}\n\n{\"q\": \"x\", \"answer\": \"y\"}\n");
  const Dataset d = load_dataset(path, DatasetKeys{"q"});
  REQUIRE(d.rows.size() == 2);
  CHECK(d.prompt(0) == "1+2=");
  CHECK(d.rows[0].at("answer") == "3");
  CHECK(d.rows[0].at("tags") == "[1]");
  write_file_atomic(path, "{\"q\": \"a\"}\n{\"q\": \n");
  CHECK_THROWS_WITH_AS(load_dataset(path, DatasetKeys{"q"}), doctest::Contains((path + ":2:").c_str()), Error);
  // Only our line number: the library's own count ("line 1") within the one line must not show.
  write_file_atomic(path, "{\"q\": \"a\"}\n\n{\"q\": nope}\n");
  try {
    load_dataset(path, DatasetKeys{"q"});
    FAIL("a line that is not JSON loaded");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.rfind(path + ":3:", 0) == 0);  // file:line:column
    CHECK(what.find("not valid JSON: syntax error") != std::string::npos);
    CHECK(what.find("line 1") == std::string::npos);
  }
  // A builtin task has the fields prompt and answer only: another prompt_key is named.
  CHECK_THROWS_WITH_AS(load_dataset("builtin:addition", DatasetKeys{"nope"}),
                       doctest::Contains("data.prompt_key: \"nope\": builtin:addition rows have the fields prompt"),
                       Error);
  // A dotted sft.response_key is found like answer_key.
  write_file_atomic(path, "{\"q\": \"a\", \"gold\": {\"text\": \"b\"}}\n");
  CHECK(load_dataset(path, DatasetKeys{"q", "answer", "gold.text"}).rows[0].at("gold.text") == "b");
  write_file_atomic(path, "{\"q\": \"a\"}\n{\"prompt\": \"b\"}\n");
  CHECK_THROWS_WITH_AS(load_dataset(path, DatasetKeys{"q"}), doctest::Contains((path + ":2: no \"q\" field").c_str()), Error);
  CHECK_THROWS_WITH_AS(load_dataset("builtin:adition", DatasetKeys{}), doctest::Contains("did you mean builtin:addition"),
                       Error);
  const Dataset add = load_dataset("builtin:addition1", DatasetKeys{});
  CHECK(add.rows.size() == 100);
  CHECK(add.rows[23].at("prompt") == "2+3=");
  CHECK(add.rows[23].at("answer") == "5");
}

TEST_CASE("metrics.jsonl rows stay JSON whatever a plugin names its reward or parts") {
  const MetricRow row = {{"step", 3}, {"reward/say \"hi\"\\", 0.5}, {"reward/a\nb/part", 1e300 * 1e300}};
  const nlohmann::json parsed = nlohmann::json::parse(metric_row_json(row));
  CHECK(parsed.at("step") == 3);
  CHECK(parsed.at("reward/say \"hi\"\\") == 0.5);
  CHECK(parsed.at("reward/a\nb/part").is_null());  // inf: JSON has no such number
}

TEST_CASE("the prompt order is a seeded permutation per epoch and resumes from its position") {
  PromptOrder a(10, 7, true), b(10, 7, true);
  const std::vector<size_t> first = a.next(10);
  CHECK(std::set<size_t>(first.begin(), first.end()).size() == 10);  // one epoch: each row once
  CHECK(first == b.next(10));
  const std::vector<size_t> crossing = a.next(13);  // epoch 1 and into epoch 2
  CHECK(crossing != std::vector<size_t>(first.begin(), first.end()));
  PromptOrder resumed(10, 7, true);
  resumed.restore({1, 0});
  CHECK(resumed.next(13) == crossing);
  PromptOrder plain(4, 7, false);
  CHECK(plain.next(6) == std::vector<size_t>{0, 1, 2, 3, 0, 1});
}

TEST_CASE("math_answer extracts boxed, #### and last-number answers and compares values") {
  CHECK(extract_math_answer("so \\boxed{\\frac{1}{2}} and \\boxed{42}").value() == "42");
  CHECK(extract_math_answer("a \\boxed{x^{2}} b").value() == "x^{2}");
  CHECK(extract_math_answer("reasoning 12 then #### 1,234").value() == "1,234");
  CHECK(extract_math_answer("it is -7.5.").value() == "-7.5");
  CHECK_FALSE(extract_math_answer("no digits").has_value());
  CHECK(parse_math_number("1,234").value() == 1234);
  CHECK(parse_math_number("3/4").value() == 0.75);
  CHECK_FALSE(parse_math_number("12abc").has_value());
  const std::vector<int32_t> ids;
  const std::string prompt = "2+3=";
  const std::map<std::string, std::string> row = {{"answer", "5"}};
  for (const auto& [response, score] : std::vector<std::pair<std::string, double>>{
           {"5", 1}, {"5.0", 1}, {"the answer is 5", 1}, {"50", 0}, {"", 0}, {"4", 0}}) {
    INFO(response);
    CHECK(math_answer_reward({prompt, response, ids, row}).score == score);
  }
  const std::map<std::string, std::string> bad = {{"answer", "five"}};
  CHECK_THROWS_WITH(math_answer_reward({prompt, std::string("5"), ids, bad}), doctest::Contains("is not a number"));
}

namespace {

RewardConfig reward_entry(const std::string& name, const std::string& pattern = "", int64_t max_length = 0) {
  RewardConfig c;
  c.name = name;
  c.pattern = pattern;
  c.max_length = max_length;
  return c;
}

double score_text(const RewardFn& fn, const std::string& response) {
  const std::string prompt = "p";
  const std::vector<int32_t> ids(3, 7);
  const std::map<std::string, std::string> row;
  return fn({prompt, response, ids, row}).score;
}

RewardResult score_length(const RewardFn& fn, size_t length) {
  const std::string prompt = "p", response = "r";
  const std::vector<int32_t> ids(length, 11);
  const std::map<std::string, std::string> row;
  return fn({prompt, response, ids, row});
}

}  // namespace

TEST_CASE("format scores 1 only when the whole response matches the pattern") {
  const RewardFn tagged = make_reward(reward_entry("format", R"(<think>.*</think>\s*<answer>-?\d+</answer>)"));
  CHECK(score_text(tagged, "<think>2 plus 3</think> <answer>5</answer>") == 1.0);
  CHECK(score_text(tagged, "<think></think><answer>-12</answer>") == 1.0);
  CHECK(score_text(tagged, "<think>x</think><answer>five</answer>") == 0.0);
  CHECK(score_text(tagged, "") == 0.0);
  // Anchored at both ends: a match inside the response is not enough.
  CHECK(score_text(tagged, "sure! <think>x</think><answer>5</answer>") == 0.0);
  CHECK(score_text(tagged, "<think>x</think><answer>5</answer> and more") == 0.0);
  CHECK(score_text(tagged, "<think>x</think><answer>5</answer>\n") == 0.0);  // no "$ before a final newline"
  // "." stops at a newline unless the pattern asks for (?s).
  CHECK(score_text(tagged, "<think>a\nb</think><answer>5</answer>") == 0.0);
  const RewardFn dotall = make_reward(reward_entry("format", R"((?s)<think>.*</think>\s*<answer>-?\d+</answer>)"));
  CHECK(score_text(dotall, "<think>a\nb</think>\n<answer>5</answer>") == 1.0);
  // The whole response, not the first alternative that matches a prefix.
  const RewardFn alternatives = make_reward(reward_entry("format", "a|ab"));
  CHECK(score_text(alternatives, "ab") == 1.0);
  CHECK(score_text(alternatives, "abc") == 0.0);
  // UTF-8 aware, and bytes that are not UTF-8 are a non-match, not an error.
  const RewardFn one_char = make_reward(reward_entry("format", "x.y"));
  CHECK(score_text(one_char, "x\xc3\xa9y") == 1.0);  // é is one character
  CHECK(score_text(one_char, "x\xffy") == 0.0);
  CHECK(score_text(make_reward(reward_entry("format", R"(\d+)")), "12\xff") == 0.0);
  // Catastrophic backtracking ends in an error (the sample's on_error decides), quickly.
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(score_text(make_reward(reward_entry("format", "(a|aa)+")), std::string(60, 'a') + "b"),
                       doctest::Contains("match limit"), Error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("reward settings are checked: bad regexes and lengths name the entry and the problem") {
  CHECK_NOTHROW(check_reward_config(reward_entry("format", "<answer>\\d+</answer>"), 0));
  CHECK_NOTHROW(check_reward_config(reward_entry("length_penalty", "", 64), 1));
  CHECK_NOTHROW(check_reward_config(reward_entry("math_answer"), 0));
  CHECK_NOTHROW(check_reward_config(reward_entry("my_plugin_reward"), 0));  // names are the registry's business
  CHECK_THROWS_WITH_AS(check_reward_config(reward_entry("format", "<answer>(\\d+</answer>"), 3),
                       doctest::Contains("reward.3.pattern: invalid regex \"<answer>(\\d+</answer>\": missing closing "
                                         "parenthesis (at offset 21)"),
                       Error);
  CHECK_THROWS_WITH_AS(check_reward_config(reward_entry("format", "a{2,1}"), 0),
                       doctest::Contains("reward.0.pattern: invalid regex \"a{2,1}\": numbers out of order"), Error);
  CHECK_THROWS_WITH_AS(check_reward_config(reward_entry("format"), 2),
                       doctest::Contains("reward.2.pattern: the format reward needs a non-empty pattern"), Error);
  CHECK_THROWS_WITH_AS(check_reward_config(reward_entry("length_penalty"), 1),
                       doctest::Contains("reward.1.max_length: the length_penalty reward needs max_length >= 1"), Error);
  CHECK_THROWS_WITH_AS(check_reward_config(reward_entry("math_answer", "x+"), 0),
                       doctest::Contains("reward.0.pattern: only the format reward reads pattern (this entry is math_answer)"),
                       Error);
  CHECK_THROWS_WITH_AS(check_reward_config(reward_entry("format", "x", 8), 4),
                       doctest::Contains("reward.4.max_length: only the length_penalty reward reads max_length"), Error);
  // make_reward checks the same settings, and names the unknown.
  CHECK_THROWS_WITH_AS(make_reward(reward_entry("format", "(")), doctest::Contains("invalid regex"), Error);
  CHECK_THROWS_WITH_AS(make_reward(reward_entry("formt", "x")), doctest::Contains("did you mean format?"), Error);
  // find_reward still knows every name; a built-in made from settings refuses to score without them.
  const auto names = reward_names();
  for (const char* name : {"math_answer", "format", "length_penalty"}) {
    CHECK(std::count(names.begin(), names.end(), name) == 1);
  }
  CHECK_THROWS_WITH(score_text(find_reward("math_answer"), "5"), doctest::Contains("no \"answer\" field"));
  CHECK_THROWS_WITH_AS(score_text(find_reward("format"), "x"), doctest::Contains("make_reward"), Error);
}

TEST_CASE("length_penalty: 0 up to max_length, linear to -1 at twice it, -1 beyond") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t m = 2 * static_cast<int64_t>(1 + rng() % 300);  // even, so that 1.5 m is a whole length
    INFO("max_length ", m);
    const RewardFn penalty = make_reward(reward_entry("length_penalty", "", m));
    // The points the documentation promises, written out rather than recomputed.
    const std::vector<std::pair<int64_t, double>> points = {
        {0, 0.0}, {1, 0.0}, {m, 0.0}, {m + m / 2, -0.5}, {2 * m, -1.0}, {3 * m, -1.0}};
    for (const auto& [length, expected] : points) {
      INFO("length ", length);
      const RewardResult r = score_length(penalty, static_cast<size_t>(length));
      CHECK(r.score == doctest::Approx(expected).epsilon(1e-12));
      REQUIRE(r.parts.size() == 1);
      CHECK(r.parts[0].first == "over");
      CHECK(r.parts[0].second == (length > m ? 1.0 : 0.0));
    }
    // Between m and 2m the penalty is the straight line through (m, 0) and (2m, -1),
    // in float64 from the two end points.
    const int64_t length = m + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(m - 1));
    const double t = static_cast<double>(length - m) / static_cast<double>(2 * m - m);
    CHECK(score_length(penalty, static_cast<size_t>(length)).score == doctest::Approx(0.0 + t * (-1.0 - 0.0)).epsilon(1e-12));
    CHECK(length_penalty(m + 1, m) < 0.0);  // the first token over already costs
  }
}

TEST_CASE("shm weights arrive whole and checked; corruption, shapes and names are errors") {
  const std::string name = "/tandem-test-" + std::to_string(::getpid());
  std::mt19937 rng(5);
  std::vector<std::vector<float>> data = {std::vector<float>(6), std::vector<float>(1000), std::vector<float>(3)};
  for (auto& v : data)
    for (float& x : v) x = std::normal_distribution<float>()(rng);
  const std::vector<ExpectedTensor> expected = {{"a", {2, 3}}, {"b", {10, 100}}, {"c", {3}}};
  std::vector<OutgoingTensor> out;
  for (size_t i = 0; i < 3; ++i) out.push_back({expected[i].name, expected[i].shape, data[i].data()});
  const ShmStats stats = publish_weights_shm(name, out, 17, 1024);
  CHECK(stats.buckets >= 2);  // 4 KB of data in 1 KB buckets
  std::map<std::string, std::vector<float>> got;
  auto sink = [&](const ExpectedTensor& t, const float* p) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    got[t.name] = std::vector<float>(p, p + n);
  };
  CHECK(receive_weights_shm(name, expected, sink) == 17);
  for (size_t i = 0; i < 3; ++i) CHECK(got[expected[i].name] == data[i]);

  std::vector<ExpectedTensor> wrong_shape = expected;
  wrong_shape[1].shape = {100, 10};
  CHECK_THROWS_WITH_AS(receive_weights_shm(name, wrong_shape, sink), doctest::Contains("tensor b has shape [10,100]"),
                       Error);
  std::vector<ExpectedTensor> missing = expected;
  missing.push_back({"d", {1}});
  CHECK_THROWS_WITH_AS(receive_weights_shm(name, missing, sink), doctest::Contains("tensor d is missing"), Error);
  std::vector<ExpectedTensor> fewer(expected.begin(), expected.begin() + 2);
  CHECK_THROWS_WITH_AS(receive_weights_shm(name, fewer, sink), doctest::Contains("unexpected tensor c"), Error);

  // Flip one byte of the data: the bucket's checksum catches it.
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  auto* bytes = static_cast<uint8_t*>(::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  bytes[size - 5] ^= 0x40;
  ::munmap(bytes, static_cast<size_t>(size));
  ::close(fd);
  CHECK_THROWS_WITH_AS(receive_weights_shm(name, expected, sink), doctest::Contains("corrupted"), Error);
  remove_weights_shm(name);
  CHECK_THROWS_WITH_AS(receive_weights_shm(name, expected, sink), doctest::Contains("cannot open"), Error);
}
