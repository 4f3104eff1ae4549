#include "controller/observe/straggler_watch.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace tandem {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

StragglerWatch::StragglerWatch(double factor, int64_t steps, double min_share)
    : factor_(factor), steps_(steps), min_share_(min_share) {}

std::vector<SlowCommand> StragglerWatch::observe(const WorkerCommandTimes& times) {
  // Each command's times over the workers that ran it.
  std::map<std::string, std::vector<double>> by_command;
  double busiest = 0;  // the step's length, as the most seconds one worker spent in commands
  for (const auto& [worker, commands] : times) {
    double busy = 0;
    for (const auto& [command, seconds] : commands) {
      by_command[command].push_back(seconds);
      busy += seconds;
    }
    busiest = std::max(busiest, busy);
  }
  std::map<std::string, SlowCommand> slowest;  // worker -> its command furthest over the median
  for (const auto& [worker, commands] : times) {
    for (const auto& [command, seconds] : commands) {
      const std::vector<double>& peers = by_command[command];
      if (peers.size() < 2) continue;  // nobody to compare with
      const double m = median(peers);
      if (m < kStragglerMinMedianSeconds || !(seconds > factor_ * m)) continue;
      if (seconds - m < min_share_ * busiest) continue;  // slower, but it costs the step little
      auto it = slowest.find(worker);
      if (it == slowest.end() || seconds / m > it->second.seconds / it->second.median_seconds) {
        slowest[worker] = {worker, command, seconds, m};
      }
    }
  }
  std::vector<SlowCommand> became;
  for (const auto& [worker, commands] : times) {
    auto slow = slowest.find(worker);
    if (slow == slowest.end()) {
      slow_in_a_row_[worker] = 0;
      stragglers_.erase(worker);
      continue;
    }
    if (++slow_in_a_row_[worker] >= steps_ && stragglers_.insert(worker).second) became.push_back(slow->second);
  }
  return became;
}

std::string worker_phases_json(int64_t step, double unix_time, const WorkerCommandTimes& times,
                               const std::set<std::string>& stragglers) {
  nlohmann::json workers = nlohmann::json::object();
  for (const auto& [worker, commands] : times) workers[worker] = commands;
  return nlohmann::json{{"step", step}, {"time", unix_time}, {"workers", workers}, {"stragglers", stragglers}}.dump();
}

}  // namespace tandem
