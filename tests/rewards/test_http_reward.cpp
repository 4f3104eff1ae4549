// HTTP rewards (rewards/http.h) against a server on loopback that the test
// starts (tests/python/reward_server.py): batches, concurrency, parts, retries with
// backoff, timeouts, and errors that name the URL.
#include "rewards/http.h"
#include "core/error.h"
#include "core/files.h"
#include "core/process.h"
#include "tests/support/run_tandem.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <thread>

using namespace tandem;

namespace {

// The server, started for one test case and killed with it.
class LoopbackServer {
 public:
  LoopbackServer() {
    process_ = ChildProcess::spawn({"/usr/bin/python3", std::string(TANDEM_SOURCE_DIR) + "/tests/python/reward_server.py"},
                                   {dir_.path() + "/server.out", true});
    for (int i = 0; i < 200 && port_.empty(); ++i) {
      const std::string out = read_file(dir_.path() + "/server.out").value_or("");
      const size_t at = out.find("PORT ");
      if (at != std::string::npos && out.find('\n', at) != std::string::npos) {
        port_ = out.substr(at + 5, out.find('\n', at) - at - 5);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    REQUIRE_MESSAGE(!port_.empty(), "the loopback reward server did not start: ",
                    read_file(dir_.path() + "/server.out").value_or(""));
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + port_ + path; }

 private:
  TempDir dir_;
  ChildProcess process_;
  std::string port_;
};

RewardConfig http_reward(const std::string& url, int64_t workers, int64_t batch_size) {
  RewardConfig c;
  c.name = "server";
  c.http = url;
  c.workers = workers;
  c.batch_size = batch_size;
  c.timeout_s = 2;
  return c;
}

struct Samples {
  explicit Samples(size_t count) {
    for (size_t i = 0; i < count; ++i) responses_.push_back(std::string(i + 1, 'x'));
    for (const std::string& r : responses_) inputs.push_back({prompt_, r, ids_, row_});
  }
  std::vector<RewardInput> inputs;

 private:
  std::vector<std::string> responses_;
  std::map<std::string, std::string> row_ = {{"answer", "42"}};
  std::string prompt_ = "What is 6*7?";
  std::vector<int32_t> ids_ = {1};
};

}  // namespace

TEST_CASE("samples go to the server in concurrent batches; scores and parts come back in order") {
  LoopbackServer server;
  HttpReward reward(http_reward(server.url("/score"), 3, 2), 0);
  Samples samples(11);
  const std::vector<RewardOutcome> outcomes = reward.score(samples.inputs);
  REQUIRE(outcomes.size() == 11);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    INFO("sample ", i, ": ", outcomes[i].error);
    REQUIRE(outcomes[i].error.empty());
    CHECK(outcomes[i].result.score == static_cast<double>(i + 1));
    REQUIRE(outcomes[i].result.parts.size() == 2);
    CHECK(outcomes[i].result.parts[0] == std::make_pair(std::string("has_truth"), 1.0));
    CHECK(outcomes[i].result.parts[1] == std::make_pair(std::string("prompt_seen"), 1.0));
  }
  // 6 batches of at most 2, 3 at a time, 0.2 s each: about 0.4 s, never 1.2 s. The server
  // counts how many overlapped.
  TempDir dir;
  ChildProcess get = ChildProcess::spawn(
      {"/usr/bin/python3", "-c",
       "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())",
       server.url("/stats")},
      {dir.path() + "/stats.json", true});
  REQUIRE(get.wait_for(10).has_value());
  const nlohmann::json counters = nlohmann::json::parse(read_file(dir.path() + "/stats.json").value_or("{}"));
  CHECK(counters["requests"] == 6);
  CHECK(counters["max_concurrent"] > 1);
  CHECK(counters["max_concurrent"] <= 3);
}

TEST_CASE("a bare JSON array answers too; a wrong count or status is every sample's error, naming the URL") {
  LoopbackServer server;
  Samples samples(3);
  for (const RewardOutcome& o : HttpReward(http_reward(server.url("/plain"), 1, 0), 0).score(samples.inputs)) {
    CHECK(o.error.empty());
  }
  for (const RewardOutcome& o : HttpReward(http_reward(server.url("/wrong_count"), 1, 0), 0).score(samples.inputs)) {
    CHECK(o.error.find("answered 1 scores for 3 samples") != std::string::npos);
  }
  for (const RewardOutcome& o : HttpReward(http_reward(server.url("/bad"), 1, 0), 0).score(samples.inputs)) {
    CHECK(o.error == "POST " + server.url("/bad") + " answered HTTP 400: bad request: no such task");
  }
  // An answer past 16 MiB is cut off unread (the controller's memory is not the server's to fill).
  RewardConfig huge = http_reward(server.url("/huge"), 1, 0);
  huge.timeout_s = 30;
  for (const RewardOutcome& o : HttpReward(huge, 0).score(samples.inputs)) {
    CHECK_MESSAGE(o.error.find("the answer is larger than 16 MiB; it was cut off unread") != std::string::npos, o.error);
  }
}

TEST_CASE("503s are retried with backoff until the server answers; timeouts and refused connections give up") {
  LoopbackServer server;
  Samples samples(2);
  RewardConfig flaky = http_reward(server.url("/flaky"), 1, 0);
  flaky.retries = 3;
  for (const RewardOutcome& o : HttpReward(flaky, 0).score(samples.inputs)) {
    INFO(o.error);
    CHECK(o.error.empty());  // two 503s, then the answer
  }
  RewardConfig slow = http_reward(server.url("/slow"), 1, 0);
  slow.timeout_s = 0.5;
  slow.retries = 1;
  for (const RewardOutcome& o : HttpReward(slow, 0).score(samples.inputs)) {
    CHECK(o.error.find("POST " + server.url("/slow") + " failed after 2 attempts: ") == 0);
    CHECK(o.error.find("timed out") != std::string::npos);
  }
  RewardConfig closed = http_reward("http://127.0.0.1:1/score", 1, 0);  // nothing listens on port 1
  closed.retries = 0;
  for (const RewardOutcome& o : HttpReward(closed, 0).score(samples.inputs)) {
    CHECK(o.error.find("POST http://127.0.0.1:1/score failed after 1 attempt: ") == 0);
  }
}

TEST_CASE("the health check finds a server that is down or a wrong path before anything starts") {
  LoopbackServer server;
  CHECK_NOTHROW(HttpReward(http_reward(server.url("/score"), 1, 0), 0).check_answers());
  CHECK_THROWS_WITH_AS(HttpReward(http_reward("http://127.0.0.1:1/score", 1, 0), 0).check_answers(),
                       doctest::Contains("http://127.0.0.1:1/score does not answer"), Error);
  CHECK_THROWS_WITH_AS(HttpReward(http_reward(server.url("/missing"), 1, 0), 0).check_answers(),
                       doctest::Contains("answered HTTP 404"), Error);
  // tandem validate says so, naming the config key, with exit 2 (nothing starts).
  TempDir dir;
  write_file_atomic(dir.path() + "/c.yaml", "reward: [{http: \"http://127.0.0.1:1/score\", retries: 0}]\n");
  const std::string out = dir.path() + "/out.txt";
  CHECK(testing::run_tandem({"validate", dir.path() + "/c.yaml"}, out).exit_code == 2);
  const std::string said = read_file(out).value_or("");
  CHECK_MESSAGE(said.find("c.yaml:1:11: reward.0.http: http://127.0.0.1:1/score does not answer") != std::string::npos,
                said);
}
