// Scoring during generation (rewards/scoring_thread.h): samples submitted while others
// generate are scored on a thread of their own by the run's scorers, each reward once
// per sample, and handed back keyed by (prompt slot, sample index).
#include "controller/data/dataset.h"
#include "rewards/scoring_thread.h"

#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>

using namespace tandem;

TEST_CASE("submitted samples are scored on another thread by every reward, and handed back by key") {
  std::atomic<int> calls{0};
  const std::thread::id submitter = std::this_thread::get_id();
  std::atomic<bool> scored_elsewhere{true};
  std::vector<std::unique_ptr<RewardScorer>> rewards;
  rewards.push_back(make_native_scorer(
      [&](const RewardInput& in) {
        ++calls;
        if (std::this_thread::get_id() == submitter) scored_elsewhere = false;
        return RewardResult{static_cast<double>(in.response.size()), {{"row", std::stod(in.row.at("answer"))}}};
      },
      2));
  rewards.push_back(make_native_scorer([](const RewardInput& in) -> RewardResult {
    if (in.response == "bad") throw std::runtime_error("cannot score");
    return {in.prompt == "p1" ? 1.0 : 0.0, {}};
  }, 1));
  const std::string p0 = "p0", p1 = "p1";
  const DataRow r0 = {{"answer", "10"}}, r1 = {{"answer", "11"}};
  ScoringThread early(rewards);
  early.begin({&p0, &p1}, {&r0, &r1});
  early.submit({{0, 0, {1, 2}, "abc", {}}, {1, 0, {3}, "bad", {}}});
  early.submit({});
  early.submit({{1, 1, {4, 5, 6}, "hello", {}}});
  auto done = early.finish();
  REQUIRE(done.size() == 3);
  CHECK(calls == 3);
  CHECK(scored_elsewhere);
  const ScoredSample& a = done.at({0, 0});
  REQUIRE(a.outcomes.size() == 2);
  CHECK(a.outcomes[0].result.score == 3.0);
  CHECK(a.outcomes[0].result.parts.at(0).second == 10.0);
  CHECK(a.outcomes[1].result.score == 0.0);
  CHECK(a.tokens == std::vector<int32_t>{1, 2});
  CHECK(done.at({1, 0}).outcomes[1].error == "cannot score");  // an error stays the sample's outcome
  CHECK(done.at({1, 1}).outcomes[0].result.parts.at(0).second == 11.0);
  CHECK(done.at({1, 1}).outcomes[1].result.score == 1.0);
  CHECK(early.busy_seconds() >= 0.0);
  // Nothing submitted since: finish() returns at once, empty.
  CHECK(early.finish().empty());
  // The next batch, on the same thread.
  early.begin({&p1}, {&r1});
  early.submit({{0, 3, {7}, "ok", {}}});
  auto next = early.finish();
  REQUIRE(next.size() == 1);
  CHECK(next.at({0, 3}).outcomes[1].result.score == 1.0);
  CHECK(calls == 4);
}

TEST_CASE("a ScoringThread destroyed with work queued ends: only the batch in progress is scored") {
  std::vector<std::unique_ptr<RewardScorer>> rewards;
  std::atomic<int> calls{0};
  std::atomic<bool> release{false};
  rewards.push_back(make_native_scorer([&](const RewardInput&) {
    ++calls;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // held until the test lets go
    return RewardResult{1.0, {}};
  }, 1));
  const std::string p = "p";
  const DataRow r;
  std::thread letting_go;
  {
    ScoringThread scoring(rewards);
    scoring.begin({&p}, {&r});
    scoring.submit({{0, 0, {1}, "x", {}}});
    while (calls == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // that batch is in progress
    for (int64_t i = 1; i < 50; ++i) scoring.submit({{0, i, {1}, "x", {}}});
    letting_go = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      release = true;
    });
  }  // the destructor drops the 49 queued samples and waits for the one in progress
  letting_go.join();
  CHECK(calls == 1);
}
