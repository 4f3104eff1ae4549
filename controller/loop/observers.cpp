// What watches a run besides metrics.jsonl (issue 18): TensorBoard event files, the
// Prometheus endpoint, the dashboard, per-worker command times with their stragglers,
// and the Chrome traces of logging.trace_every.
#include "controller/observe/dashboard_server.h"
#include "controller/observe/prometheus_exporter.h"
#include "controller/observe/step_trace.h"
#include "controller/observe/tensorboard_writer.h"
#include "controller/loop/training_loop_impl.h"
#include "core/files.h"
#include "core/log.h"
#include "core/trace.h"
#include "core/trace_wire.h"

#include <filesystem>

namespace tandem::training {

TrainingLoop::TrainingLoop(WorkerPool& pool, const Config& config, RunInputs inputs, const std::string& run_dir)
    : pool_(pool),
      c_(config),
      run_dir_(run_dir),
      model_dir_(std::move(inputs.model_dir)),
      model_(std::move(inputs.model)),
      tokenizer_(std::move(inputs.tokenizer)),
      data_(std::move(inputs.data)),
      prompt_ids_(std::move(inputs.prompt_ids)),
      val_data_(std::move(inputs.val_data)),
      val_prompt_ids_(std::move(inputs.val_prompt_ids)),
      skipped_long_prompts_(inputs.skipped_long_prompts),
      rewards_(std::move(inputs.rewards)) {}

TrainingLoop::~TrainingLoop() {
  pool_.set_health_observer({});  // the pool outlives the loop (it shuts the workers down after)
}

void TrainingLoop::open_observers() {
  const LoggingConfig& l = c_.logging;
  stragglers_ = std::make_unique<StragglerWatch>(l.straggler.factor, l.straggler.steps, l.straggler.min_share);
  if (l.tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(run_dir_ + "/tensorboard");
  if (l.prometheus.port >= 0) {
    prometheus_ = std::make_unique<PrometheusExporter>(l.prometheus.bind, l.prometheus.port);
    write_file_atomic(run_dir_ + "/prometheus_port", std::to_string(prometheus_->port()) + "\n");
    log::info("Prometheus metrics at http://{}:{}/metrics", l.prometheus.bind, prometheus_->port());
    // Heartbeat ages and worker states between steps too (a step may take minutes).
    pool_.set_health_observer([this] { publish_workers(); });
  }
  if (l.dashboard) {
    dashboard_ = std::make_unique<DashboardServer>(run_dir_, "127.0.0.1", static_cast<int>(l.dashboard_port));
    dashboard_->start();  // writes RUN_DIR/dashboard_url
    log::info("dashboard at {}", dashboard_->url());
    std::fprintf(stderr, "tandem: dashboard at %s\n", dashboard_->url().c_str());
  }
}

void TrainingLoop::observe_workers(int64_t step, MetricRow& row) {
  last_command_times_.clear();
  for (auto& [worker, commands] : pool_.take_command_times()) {
    for (auto& [command, seconds] : commands) {
      if (command.rfind("trace_", 0) != 0) last_command_times_[worker][command] = seconds;  // tracing's own: not the step's work
    }
  }
  for (const SlowCommand& slow : stragglers_->observe(last_command_times_)) {
    log::warn("{} is a straggler: {} took {:.3f} s, {:.1f}x the median {:.3f} s of its peers, {} steps in a row "
              "(logging.straggler)",
              slow.worker, slow.command, slow.seconds, slow.seconds / slow.median_seconds, slow.median_seconds,
              c_.logging.straggler.steps);
  }
  row.emplace_back("perf/stragglers", static_cast<double>(stragglers_->stragglers().size()));
  if (worker_phases_log_) {
    worker_phases_log_->write_line(worker_phases_json(step, unix_now(), last_command_times_, stragglers_->stragglers()));
  }
}

void TrainingLoop::publish_step(int64_t step, const MetricRow& row) {
  if (tensorboard_) tensorboard_->write(step, row, unix_now());
  if (prometheus_) {
    prometheus_->publish_step(step, c_.experiment.steps, row);
    publish_workers();
  }
}

void TrainingLoop::publish_workers() {
  if (!prometheus_) return;
  std::vector<PrometheusWorker> workers;
  for (const WorkerStatus& w : pool_.status()) {
    PrometheusWorker p;
    p.name = w.id.name();
    p.role = w.id.role;
    p.rank = w.id.rank;
    p.hostname = w.hostname;
    p.up = w.state == WorkerState::ready;
    p.restarts = w.restarts;
    p.last_heartbeat_unix = w.last_heartbeat_unix;
    auto times = last_command_times_.find(p.name);
    if (times != last_command_times_.end()) p.command_seconds = times->second;
    workers.push_back(std::move(p));
  }
  prometheus_->publish_workers(workers);
}

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
