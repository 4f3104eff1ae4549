// What a span costs (core/trace.h): spans are recorded on every step, traced or not.
// Prints JSON lines: ns per span on one thread and on two threads at once, against the
// floor of any span (two reads of the clock) measured in the same run; with a step trace
// (RUN_DIR/traces/step_N.json) as argument, the share of that step its spans cost.
#include "core/files.h"
#include "core/trace.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

double ns_per(int64_t count, Clock::time_point start) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / static_cast<double>(count);
}

double spans_ns(int64_t count) {
  const auto start = Clock::now();
  for (int64_t i = 0; i < count; ++i) tandem::trace::Span span("bench", "bench");
  return ns_per(count, start);
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int64_t kCount = 2'000'000;
  volatile int64_t sink = 0;
  auto start = Clock::now();
  for (int64_t i = 0; i < kCount; ++i) sink = sink + tandem::trace::now_us() + tandem::trace::now_us();
  const double clock_ns = ns_per(kCount, start);
  const double one_thread_ns = spans_ns(kCount);
  double other_ns = 0;
  std::thread other([&] { other_ns = spans_ns(kCount); });
  const double two_threads_ns = spans_ns(kCount);
  other.join();
  tandem::trace::take();
  std::printf("{\"bench\": \"trace_span\", \"threads\": 1, \"ns_per_span\": %.1f, \"reference\": \"two clock reads\", "
              "\"reference_ns\": %.1f, \"ratio\": %.2f}\n",
              one_thread_ns, clock_ns, one_thread_ns / clock_ns);
  std::printf("{\"bench\": \"trace_span\", \"threads\": 2, \"ns_per_span\": %.1f, \"reference\": \"two clock reads\", "
              "\"reference_ns\": %.1f, \"ratio\": %.2f}\n",
              (two_threads_ns + other_ns) / 2, clock_ns, (two_threads_ns + other_ns) / 2 / clock_ns);
  if (argc > 1) {
    const nlohmann::json trace = nlohmann::json::parse(tandem::read_file(argv[1]).value_or("{}"));
    int64_t spans = 0;
    for (const auto& e : trace.value("traceEvents", nlohmann::json::array())) spans += e.value("ph", "") == "X";
    const double step_ns = trace["otherData"].value("duration_us", 1.0) * 1000.0;
    std::printf("{\"bench\": \"trace_share_of_step\", \"trace\": \"%s\", \"spans\": %lld, \"step_ms\": %.3f, "
                "\"span_cost_ms\": %.4f, \"share\": %.6f}\n",
                argv[1], static_cast<long long>(spans), step_ns / 1e6, spans * one_thread_ns / 1e6,
                spans * one_thread_ns / step_ns);
  }
  return 0;
}
