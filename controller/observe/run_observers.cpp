// The run's observers (run_observers.h).
#include "controller/observe/run_observers.h"

#include "controller/observe/dashboard_server.h"
#include "controller/observe/prometheus_exporter.h"
#include "controller/observe/tensorboard_writer.h"
#include "controller/run/checkpoints.h"
#include "controller/run/run_status.h"
#include "controller/workers/worker_pool.h"
#include "core/files.h"
#include "core/log.h"

#include <cstdio>

namespace tandem {

RunObservers::RunObservers(WorkerPool& pool, const Config& config, const std::string& run_dir)
    : pool_(pool),
      logging_(config.logging),
      run_dir_(run_dir),
      stragglers_(config.logging.straggler.factor, config.logging.straggler.steps, config.logging.straggler.min_share) {
  const LoggingConfig& l = logging_;
  if (l.tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(run_dir_ + "/tensorboard");
  if (l.prometheus.port >= 0) {
    prometheus_ = std::make_unique<PrometheusExporter>(l.prometheus.bind, l.prometheus.port);
    write_file_atomic(run_dir_ + "/prometheus_port", std::to_string(prometheus_->port()) + "\n");
    log::info("Prometheus metrics at http://{}:{}/metrics", l.prometheus.bind, prometheus_->port());
  }
  if (l.dashboard) {
    dashboard_ = std::make_unique<DashboardServer>(run_dir_, "127.0.0.1", static_cast<int>(l.dashboard_port));
    dashboard_->start();  // writes RUN_DIR/dashboard_url
    log::info("dashboard at {}", dashboard_->url());
    std::fprintf(stderr, "tandem: dashboard at %s\n", dashboard_->url().c_str());
  }
  // Heartbeat ages and worker states between steps too (a step may take minutes). Last,
  // so that a constructor that throws leaves the pool no pointer to a half-made object.
  if (prometheus_) pool_.set_health_observer([this] { publish_workers(); });
}

RunObservers::~RunObservers() { pool_.set_health_observer({}); }

void RunObservers::restart_at(int64_t step) {
  const std::string path = run_dir_ + "/worker_phases.jsonl";
  worker_phases_log_.reset();  // truncation replaces the file: reopen after it
  truncate_metrics(path, step);
  worker_phases_log_ = std::make_unique<MetricsWriter>(logging_.jsonl ? path : "");
}

void RunObservers::observe_workers(int64_t step, MetricRow& row) {
  last_command_times_.clear();
  for (auto& [worker, commands] : pool_.take_command_times()) {
    for (auto& [command, seconds] : commands) {
      if (command.rfind("trace_", 0) != 0) last_command_times_[worker][command] = seconds;  // tracing's own: not the step's work
    }
  }
  for (const SlowCommand& slow : stragglers_.observe(last_command_times_)) {
    log::warn("{} is a straggler: {} took {:.3f} s, {:.1f}x the median {:.3f} s of its peers, {} steps in a row "
              "(logging.straggler)",
              slow.worker, slow.command, slow.seconds, slow.seconds / slow.median_seconds, slow.median_seconds,
              logging_.straggler.steps);
  }
  row.emplace_back("perf/stragglers", static_cast<double>(stragglers_.stragglers().size()));
  if (worker_phases_log_) {
    worker_phases_log_->write_line(worker_phases_json(step, unix_now(), last_command_times_, stragglers_.stragglers()));
  }
}

void RunObservers::publish_step(int64_t step, int64_t total_steps, const MetricRow& row) {
  if (tensorboard_) tensorboard_->write(step, row, unix_now());
  if (prometheus_) {
    prometheus_->publish_step(step, total_steps, row);
    publish_workers();
  }
}

void RunObservers::publish_workers() {
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

}  // namespace tandem
