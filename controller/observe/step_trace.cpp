#include "controller/observe/step_trace.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace tandem {

ClockOffset clock_offset_from(const std::vector<ClockSample>& samples) {
  TANDEM_CHECK(!samples.empty(), "clock_offset_from: no round trips");
  const ClockSample* best = nullptr;
  int64_t best_round_trip = std::numeric_limits<int64_t>::max();
  for (const ClockSample& s : samples) {
    const int64_t round_trip = s.received_us - s.sent_us;
    if (round_trip >= 0 && round_trip < best_round_trip) {
      best_round_trip = round_trip;
      best = &s;
    }
  }
  TANDEM_CHECK(best != nullptr, "clock_offset_from: every round trip ended before it began");
  // The worker read its clock somewhere in the round trip: the middle is the best guess.
  const int64_t middle = best->sent_us + best_round_trip / 2;
  return {best->worker_us - middle, (best_round_trip + 1) / 2};
}

namespace {

nlohmann::json metadata(const char* what, int pid, int64_t tid, const nlohmann::json& args) {
  nlohmann::json event = {{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", args}};
  if (tid >= 0) event["tid"] = tid;
  return event;
}

}  // namespace

nlohmann::json chrome_trace(int64_t step, int64_t begin_us, int64_t end_us, const std::vector<ProcessSpans>& processes) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json clocks = nlohmann::json::object();
  for (size_t p = 0; p < processes.size(); ++p) {
    const ProcessSpans& process = processes[p];
    const nlohmann::json& c = process.collected;
    // Track groups are numbered by position, not by OS pid: pids of different hosts may clash.
    const int track = static_cast<int>(p);
    events.push_back(metadata("process_name", track, -1,
                              {{"name", fmt::format("{} ({}, pid {})", process.name, c.value("host", std::string("?")),
                                                    c.value("pid", int64_t{0}))}}));
    events.push_back(metadata("process_sort_index", track, -1, {{"sort_index", track}}));
    const nlohmann::json threads = c.value("threads", nlohmann::json::object());
    for (const auto& [tid, name] : threads.items()) {
      events.push_back(metadata("thread_name", track, std::stoll(tid), {{"name", name}}));
    }
    clocks[process.name] = {{"offset_us", process.clock_offset_us},
                            {"error_us", process.clock_error_us},
                            {"dropped_spans", c.value("dropped", int64_t{0})}};
    for (const nlohmann::json& s : c.value("spans", nlohmann::json::array())) {
      // [name, category, start_us, duration_us, tid, count], on the process's own clock.
      const int64_t start = s.at(2).get<int64_t>() - process.clock_offset_us;
      const int64_t end = start + s.at(3).get<int64_t>();
      if (end < begin_us || start > end_us) continue;
      const int64_t clipped_start = std::max(start, begin_us), clipped_end = std::min(end, end_us);
      nlohmann::json event = {{"name", s.at(0)},
                              {"cat", s.at(1)},
                              {"ph", "X"},
                              {"ts", clipped_start - begin_us},
                              {"dur", clipped_end - clipped_start},
                              {"pid", track},
                              {"tid", s.at(4)}};
      if (s.at(5).get<int64_t>() >= 0) event["args"] = {{"count", s.at(5)}};
      events.push_back(std::move(event));
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"step", step}, {"duration_us", end_us - begin_us}, {"clocks", clocks}}}};
}

std::string step_trace_path(const std::string& run_dir, int64_t step) {
  return fmt::format("{}/traces/step_{}.json", run_dir, step);
}

}  // namespace tandem
