// The training loop's pieces that need no worker: datasets and their order, the built-in
// math_answer reward, the shared-memory weight transport.
#include "controller/dataset.h"
#include "core/error.h"
#include "core/files.h"
#include "plugins/rewards.h"
#include "weight_sync/shm.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/mman.h>

#include <cstring>
#include <random>
#include <set>

using namespace tandem;

TEST_CASE("JSONL datasets keep every field; bad lines are named by file and line") {
  TempDir dir;
  const std::string path = dir.path() + "/d.jsonl";
  write_file_atomic(path, "{\"q\": \"1+2=\", \"answer\": 3, \"tags\": [1]}\n\n{\"q\": \"x\", \"answer\": \"y\"}\n");
  const Dataset d = load_dataset(path, "q");
  REQUIRE(d.rows.size() == 2);
  CHECK(d.prompt(0) == "1+2=");
  CHECK(d.rows[0].at("answer") == "3");
  CHECK(d.rows[0].at("tags") == "[1]");
  write_file_atomic(path, "{\"q\": \"a\"}\n{\"q\": \n");
  CHECK_THROWS_WITH_AS(load_dataset(path, "q"), doctest::Contains((path + ":2: not valid JSON").c_str()), Error);
  write_file_atomic(path, "{\"q\": \"a\"}\n{\"prompt\": \"b\"}\n");
  CHECK_THROWS_WITH_AS(load_dataset(path, "q"), doctest::Contains((path + ":2: no \"q\" field").c_str()), Error);
  CHECK_THROWS_WITH_AS(load_dataset("builtin:adition", "prompt"), doctest::Contains("did you mean builtin:addition"),
                       Error);
  const Dataset add = load_dataset("builtin:addition1", "prompt");
  CHECK(add.rows.size() == 100);
  CHECK(add.rows[23].at("prompt") == "2+3=");
  CHECK(add.rows[23].at("answer") == "5");
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
