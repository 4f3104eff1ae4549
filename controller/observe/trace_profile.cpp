#include "controller/observe/trace_profile.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace tandem {
namespace {

struct Event {
  std::string name;
  std::string category;
  int64_t begin = 0, end = 0;  // µs from the step's start
  int process = 0;
  int64_t thread = 0;
};

double seconds(int64_t us) { return static_cast<double>(us) / 1e6; }

// The total length of the union of [begin, end) intervals.
int64_t covered(std::vector<std::pair<int64_t, int64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  int64_t total = 0, reach = INT64_MIN;
  for (const auto& [b, e] : intervals) {
    const int64_t from = std::max(b, reach);
    if (e > from) total += e - from;
    reach = std::max(reach, e);
  }
  return total;
}

}  // namespace

StepProfile profile_step_trace(const nlohmann::json& trace) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace.contains("otherData")) {
    throw Error("not a tandem step trace: traceEvents or otherData is missing");
  }
  StepProfile profile;
  profile.step = trace["otherData"].value("step", int64_t{0});
  const int64_t duration = trace["otherData"].value("duration_us", int64_t{0});
  profile.seconds = seconds(duration);

  std::map<int, std::string> process_names;
  std::vector<Event> events;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    if (ph == "M" && e.value("name", "") == "process_name") {
      std::string name = e["args"].value("name", "");
      process_names[e.value("pid", 0)] = name.substr(0, name.find(" ("));
    } else if (ph == "X") {
      const int64_t ts = e.value("ts", int64_t{0});
      events.push_back({e.value("name", ""), e.value("cat", ""), ts, ts + e.value("dur", int64_t{0}), e.value("pid", 0),
                        e.value("tid", int64_t{0})});
    }
  }
  if (process_names.empty()) throw Error("not a tandem step trace: no process_name metadata");

  // Phases: the controller's (track 0) spans of category "phase", in time order.
  std::vector<const Event*> phases;
  for (const Event& e : events) {
    if (e.process == 0 && e.category == "phase") phases.push_back(&e);
  }
  std::sort(phases.begin(), phases.end(), [](const Event* a, const Event* b) { return a->begin < b->begin; });

  for (const Event* phase : phases) {
    PhaseProfile p;
    p.name = phase->name;
    p.begin_s = seconds(phase->begin);
    p.seconds = seconds(phase->end - phase->begin);
    const Event* last = nullptr;  // the worker command inside the phase that ended last
    for (const Event& e : events) {
      if (e.process == 0 || e.category != "command") continue;
      if (e.end <= phase->begin || e.begin >= phase->end) continue;
      if (!last || e.end > last->end) last = &e;
    }
    if (last) {
      p.critical_process = process_names[last->process];
      p.critical_command = last->name;
      p.critical_seconds = seconds(last->end - last->begin);
      std::map<std::string, int64_t> parts;  // inner spans of that command, same process
      for (const Event& e : events) {
        if (&e == last || e.process != last->process || e.category == "command") continue;
        if (e.begin >= last->begin && e.end <= last->end) parts[e.name] += e.end - e.begin;
      }
      for (const auto& [name, us] : parts) p.critical_parts.push_back({name, seconds(us)});
      std::sort(p.critical_parts.begin(), p.critical_parts.end(),
                [](const ProfileSpan& a, const ProfileSpan& b) { return a.seconds > b.seconds; });
    }
    profile.phases.push_back(std::move(p));
  }

  for (const auto& [process, name] : process_names) {
    if (process == 0) continue;
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const Event& e : events) {
      if (e.process == process && e.category == "command") busy.emplace_back(e.begin, e.end);
    }
    WorkerProfile w;
    w.name = name;
    w.busy_seconds = seconds(covered(busy));
    w.idle_share = duration > 0 ? 1.0 - static_cast<double>(covered(busy)) / static_cast<double>(duration) : 0.0;
    profile.workers.push_back(w);
  }
  return profile;
}

std::string describe_step_profile(const StepProfile& profile) {
  std::string out = fmt::format("step {}: {:.3f} s\n\ncritical path:\n", profile.step, profile.seconds);
  const double total = profile.seconds > 0 ? profile.seconds : 1.0;
  for (const PhaseProfile& p : profile.phases) {
    out += fmt::format("  {:<12} {:8.3f} s {:5.1f}%", p.name, p.seconds, 100.0 * p.seconds / total);
    if (p.critical_process.empty()) {
      out += "  controller\n";
      continue;
    }
    out += fmt::format("  {} {} {:.3f} s", p.critical_process, p.critical_command, p.critical_seconds);
    std::string parts;
    for (size_t i = 0; i < p.critical_parts.size() && i < 4; ++i) {
      parts += fmt::format("{}{} {:.3f} s", i ? ", " : "", p.critical_parts[i].name, p.critical_parts[i].seconds);
    }
    if (!parts.empty()) out += " (" + parts + ")";
    out += "\n";
  }
  double phases_s = 0;
  for (const PhaseProfile& p : profile.phases) phases_s += p.seconds;
  out += fmt::format("  {:<12} {:8.3f} s {:5.1f}%  controller, between phases\n", "other",
                     std::max(0.0, profile.seconds - phases_s), 100.0 * std::max(0.0, profile.seconds - phases_s) / total);
  out += "\nworkers (idle: no command running):\n";
  for (const WorkerProfile& w : profile.workers) {
    out += fmt::format("  {:<14} busy {:8.3f} s  idle {:5.1f}%\n", w.name, w.busy_seconds, 100.0 * w.idle_share);
  }
  return out;
}

}  // namespace tandem
