// Spans (core/trace.h), step traces (controller/observe/step_trace.h), their profile
// (controller/observe/trace_profile.h) and stragglers (controller/observe/straggler_watch.h).
#include "controller/observe/step_trace.h"
#include "controller/observe/straggler_watch.h"
#include "controller/observe/trace_profile.h"
#include "core/error.h"
#include "core/trace.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <random>
#include <thread>

using namespace tandem;

TEST_CASE("spans are recorded per thread, drained by take(), and the ring keeps the newest") {
  trace::take();
  trace::take_dropped();
  const int64_t before = trace::now_us();
  {
    trace::Span outer("outer", "test");
    outer.set_count(7);
    std::thread([] { trace::Span inner("other_thread", "test"); }).join();
  }
  std::vector<trace::SpanRecord> spans = trace::take();
  REQUIRE(spans.size() == 2);
  CHECK(std::strcmp(spans[0].name, "other_thread") == 0);  // ended first
  CHECK(std::strcmp(spans[1].name, "outer") == 0);
  CHECK(spans[1].count == 7);
  CHECK(spans[1].start_us >= before);
  CHECK(spans[0].thread_id != spans[1].thread_id);
  CHECK(spans[0].start_us >= spans[1].start_us);
  CHECK(spans[0].start_us + spans[0].duration_us <= spans[1].start_us + spans[1].duration_us);
  CHECK(trace::take().empty());

  for (size_t i = 0; i < trace::kSpanCapacity + 10; ++i) trace::record(i < 10 ? "old" : "new", "test", trace::now_us());
  spans = trace::take();
  CHECK(spans.size() == trace::kSpanCapacity);
  CHECK(std::strcmp(spans.front().name, "new") == 0);
  CHECK(trace::take_dropped() == 10);

  trace::record("x", "test", trace::now_us(), 3);
  const nlohmann::json collected = trace::collect_json();
  REQUIRE(collected["spans"].size() == 1);
  CHECK(collected["spans"][0][0] == "x");
  CHECK(collected["spans"][0][5] == 3);
  CHECK(collected["threads"].size() >= 2);
  CHECK(collected["pid"].get<int64_t>() > 0);
}

TEST_CASE("clock offsets come from the shortest round trip") {
  // The worker's clock is 5000 µs ahead; trips with queueing delay on one side mislead.
  std::vector<ClockSample> samples = {{1000, 6900, 2000}, {3000, 8010, 3020}, {4000, 9600, 4900}};
  const ClockOffset o = clock_offset_from(samples);
  CHECK(o.offset_us == 5000);
  CHECK(o.error_us == 10);
  CHECK_THROWS_AS(clock_offset_from({}), Error);
}

namespace {

nlohmann::json collected(const std::string& host, std::vector<nlohmann::json> spans) {
  return {{"pid", 42}, {"host", host}, {"now_us", 0}, {"dropped", 0}, {"threads", {{"101", "main"}}}, {"spans", spans}};
}

}  // namespace

TEST_CASE("a step trace aligns worker clocks, clips to the step, and profiles its critical path") {
  // Controller clock: the step runs 10'000..20'000 µs. rollout-1's clock is 1'000'000 µs ahead.
  std::vector<ProcessSpans> processes;
  processes.push_back({"controller",
                       collected("c", {{"rollout", "phase", 10'000, 6'000, 101, -1},
                                       {"train", "phase", 16'000, 3'000, 101, -1},
                                       {"before", "phase", 1'000, 2'000, 101, -1}}),
                       0, 0});
  processes.push_back({"rollout-0",
                       collected("w", {{"rollout_generate", "command", 10'100, 2'000, 101, -1},
                                       {"decode", "generate", 10'200, 1'000, 101, 4}}),
                       0, 0});
  processes.push_back({"rollout-1",
                       collected("w", {{"rollout_generate", "command", 1'010'100, 5'800, 101, -1},
                                       {"prefill", "generate", 1'010'200, 1'000, 101, 4},
                                       {"decode", "generate", 1'011'300, 3'000, 101, 4},
                                       {"decode", "generate", 1'014'400, 1'000, 101, 4}}),
                       1'000'000, 20});
  processes.push_back({"learner-0",
                       collected("w", {{"learner_train", "command", 16'100, 2'800, 101, -1},
                                       {"micro_batch", "train", 16'200, 1'000, 101, 64},
                                       {"late", "command", 19'500, 1'000, 101, -1}}),
                       0, 0});
  const nlohmann::json trace = chrome_trace(7, 10'000, 20'000, processes);
  CHECK(trace["otherData"]["step"] == 7);
  CHECK(trace["otherData"]["clocks"]["rollout-1"]["offset_us"] == 1'000'000);
  int64_t spans = 0;
  bool saw_clipped = false, saw_shifted = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++spans;
    CHECK(e["name"] != "before");  // outside the step
    CHECK(e["ts"].get<int64_t>() >= 0);
    CHECK(e["ts"].get<int64_t>() + e["dur"].get<int64_t>() <= 10'000);
    if (e["name"] == "late") saw_clipped = e["dur"] == 500;
    if (e["pid"] == 2 && e["name"] == "rollout_generate") saw_shifted = e["ts"] == 100;
  }
  CHECK(spans == 11);  // every span but "before"
  CHECK(saw_clipped);
  CHECK(saw_shifted);

  const StepProfile p = profile_step_trace(trace);
  CHECK(p.step == 7);
  CHECK(p.seconds == doctest::Approx(0.010));
  REQUIRE(p.phases.size() == 2);
  CHECK(p.phases[0].name == "rollout");
  CHECK(p.phases[0].critical_process == "rollout-1");
  CHECK(p.phases[0].critical_seconds == doctest::Approx(0.0058));
  REQUIRE(!p.phases[0].critical_parts.empty());
  CHECK(p.phases[0].critical_parts[0].name == "decode");
  CHECK(p.phases[0].critical_parts[0].seconds == doctest::Approx(0.004));
  CHECK(p.phases[1].critical_process == "learner-0");
  REQUIRE(p.workers.size() == 3);
  CHECK(p.workers[0].name == "rollout-0");
  CHECK(p.workers[0].idle_share == doctest::Approx(0.8));
  CHECK(p.workers[2].busy_seconds == doctest::Approx(0.0033));
  const std::string text = describe_step_profile(p);
  CHECK(text.find("rollout-1 rollout_generate") != std::string::npos);
  CHECK(text.find("idle  80.0%") != std::string::npos);

  CHECK_THROWS_AS(profile_step_trace(nlohmann::json::object()), Error);
}

TEST_CASE("a worker slower than its peers' median for `steps` steps in a row is a straggler") {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  StragglerWatch watch(1.5, 3, 0.05);
  auto step = [&](double slow_factor) {
    WorkerCommandTimes times;
    for (int w = 0; w < 4; ++w) times["rollout-" + std::to_string(w)]["rollout_generate"] = 0.5 * jitter(rng);
    times["rollout-2"]["rollout_generate"] *= slow_factor;
    times["learner-0"]["learner_train"] = 2.0;  // alone in its command: never compared
    return watch.observe(times);
  };
  CHECK(step(3.0).empty());
  CHECK(step(3.0).empty());
  CHECK(step(1.0).empty());  // the run of slow steps is broken
  CHECK(step(3.0).empty());
  CHECK(step(3.0).empty());
  const std::vector<SlowCommand> became = step(3.0);
  REQUIRE(became.size() == 1);
  CHECK(became[0].worker == "rollout-2");
  CHECK(became[0].command == "rollout_generate");
  CHECK(became[0].seconds > 1.5 * became[0].median_seconds);
  CHECK(watch.stragglers() == std::set<std::string>{"rollout-2"});
  CHECK(step(3.0).empty());  // reported once
  CHECK(watch.stragglers().size() == 1);
  CHECK(step(1.0).empty());
  CHECK(watch.stragglers().empty());

  const nlohmann::json line = nlohmann::json::parse(
      worker_phases_json(3, 1.5e9, {{"rollout-0", {{"rollout_generate", 0.25}}}}, {"rollout-0"}));
  CHECK(line["step"] == 3);
  CHECK(line["workers"]["rollout-0"]["rollout_generate"] == 0.25);
  CHECK(line["stragglers"][0] == "rollout-0");
}

TEST_CASE("a command slower than its peers but a tiny share of the step is not a straggler") {
  // The quickstart's case: rollout_load_weights 2 ms on one worker against 1 ms on the
  // other, in a step of 190 ms. 2x the median, but 0.5% of the step.
  StragglerWatch watch(1.5, 1, 0.05);
  WorkerCommandTimes times;
  times["colocated-0"] = {{"rollout_load_weights", 0.002}, {"learner_train", 0.150}, {"rollout_generate", 0.03}};
  times["colocated-1"] = {{"rollout_load_weights", 0.001}, {"learner_train", 0.150}, {"rollout_generate", 0.03}};
  times["colocated-2"] = times["colocated-1"];
  for (int step = 0; step < 5; ++step) CHECK(watch.observe(times).empty());
  CHECK(watch.stragglers().empty());
  // A slow step's main command is reported: 0.15 s over the median, about half the step.
  times["colocated-0"]["learner_train"] = 0.250;
  times["colocated-1"]["learner_train"] = 0.100;
  times["colocated-2"]["learner_train"] = 0.100;
  const std::vector<SlowCommand> became = watch.observe(times);
  REQUIRE(became.size() == 1);
  CHECK(became[0].command == "learner_train");
}
