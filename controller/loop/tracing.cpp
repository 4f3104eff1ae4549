// The Chrome traces of logging.trace_every: a traced step starts with every process's
// spans dropped and ends with them collected, each worker's clock measured against the
// controller's, into RUN_DIR/traces/step_<N>.json (controller/observe/step_trace.h).
#include "controller/loop/training_loop_impl.h"
#include "controller/observe/step_trace.h"
#include "core/files.h"
#include "core/log.h"
#include "core/trace.h"
#include "core/trace_wire.h"

#include <filesystem>

namespace tandem::training {

void TrainingLoop::begin_trace() {
  std::vector<Request> drains;
  for (const WorkerStatus& w : pool_.status()) drains.push_back(request(w.id, "trace_collect", ""));
  collect(std::move(drains));  // spans of earlier steps: not this trace's
  trace::take();
  trace_begin_us_ = trace::now_us();
}

void TrainingLoop::write_trace(int64_t step) {
  const int64_t end_us = trace::now_us();
  std::vector<ProcessSpans> processes;
  processes.push_back({"controller", trace::collect_json(), 0, 0});
  try {
    for (const WorkerStatus& w : pool_.status()) {
      // The worker's clock against ours: a few round trips of an empty command, the
      // shortest of them counted (the workers are idle between steps).
      std::vector<ClockSample> samples;
      nlohmann::json collected;
      for (int trip = 0; trip < 5; ++trip) {
        ClockSample s;
        s.sent_us = trace::now_us();
        const uint64_t id = pool_.send(w.id, trip == 4 ? "trace_collect" : "trace_clock");
        CommandReply reply = std::move(pool_.wait({id}).at(id));
        s.received_us = trace::now_us();
        const std::string what = fmt::format("{} reply from {}", trip == 4 ? "trace_collect" : "trace_clock", w.id.name());
        if (trip == 4) {
          collected = trace::read_collected_reply(reply.reply.body, what);
          s.worker_us = collected.at("now_us").get<int64_t>();
        } else {
          s.worker_us = trace::read_clock_reply(reply.reply.body, what);
        }
        samples.push_back(s);
      }
      const ClockOffset offset = clock_offset_from(samples);
      processes.push_back({w.id.name(), std::move(collected), offset.offset_us, offset.error_us});
    }
  } catch (const WorkerFailure& e) {
    // The trace is not worth the run: the failure shows again where the step's work needs the worker.
    log::warn("step {}: no trace: {}", step, e.what());
    return;
  }
  const std::string path = step_trace_path(run_dir_, step);
  try {
    std::filesystem::create_directories(run_dir_ + "/traces");
    write_file_atomic(path, chrome_trace(step, trace_begin_us_, end_us, processes).dump());
    log::info("step {}: trace in {} (tandem profile {} --step {})", step, path, run_dir_, step);
  } catch (const std::exception& e) {
    log::warn("step {}: cannot write {}: {}", step, path, e.what());
  }
}

}  // namespace tandem::training
