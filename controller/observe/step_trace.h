// The Chrome trace of one step (logging.trace_every): RUN_DIR/traces/step_<N>.json in the
// trace event format that Perfetto UI and chrome://tracing open. One track group
// ("process") per tandem process: the controller first, then each worker, one track per
// thread that recorded spans. Worker clocks are moved onto the controller's by offsets
// measured over the control plane, and times start at 0 at the step's start.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// One process's spans, as core/trace.h collect_json() returns them.
struct ProcessSpans {
  std::string name;           // "controller", "rollout-0", ...
  nlohmann::json collected;   // {pid, host, now_us, dropped, threads, spans}
  int64_t clock_offset_us = 0;  // this process's clock minus the controller's
  int64_t clock_error_us = 0;   // half the round trip the offset was measured over
};

// A worker clock offset from round trips: the controller sent at `sent_us` and got the
// reply at `received_us` (its clock); the worker read `worker_us` in between. The trip
// with the shortest round trip wins; error is half of it.
struct ClockSample {
  int64_t sent_us = 0;
  int64_t worker_us = 0;
  int64_t received_us = 0;
};
struct ClockOffset {
  int64_t offset_us = 0;
  int64_t error_us = 0;
};
ClockOffset clock_offset_from(const std::vector<ClockSample>& samples);

// The trace of the window [begin_us, end_us] (controller clock): spans that overlap it,
// clipped to it. `step` goes into otherData with each process's offset and error.
nlohmann::json chrome_trace(int64_t step, int64_t begin_us, int64_t end_us, const std::vector<ProcessSpans>& processes);

std::string step_trace_path(const std::string& run_dir, int64_t step);

}  // namespace tandem
