// What watches a training run besides metrics.jsonl: TensorBoard event files, the
// Prometheus endpoint (with the pool's worker gauges, refreshed between steps too), the
// dashboard, and each worker's command times per step (RUN_DIR/worker_phases.jsonl)
// with the stragglers among them. The step loop (controller/loop/) hands it each step's
// metric row; the Chrome traces of logging.trace_every stay in the loop
// (loop/tracing.cpp), since collecting them is a round of commands to the workers.
#pragma once

#include "controller/observe/straggler_watch.h"
#include "controller/run/metrics_writer.h"
#include "core/config.h"

#include <cstdint>
#include <memory>
#include <string>

namespace tandem {

class DashboardServer;
class PrometheusExporter;
class TensorBoardWriter;
class WorkerPool;

class RunObservers {
 public:
  // Starts what config.logging asks for (Prometheus writes RUN_DIR/prometheus_port, the
  // dashboard RUN_DIR/dashboard_url). worker_phases.jsonl opens at restart_at.
  RunObservers(WorkerPool& pool, const Config& config, const std::string& run_dir);
  // Stops the pool's calls into publish_workers (the pool outlives the observers).
  ~RunObservers();
  RunObservers(const RunObservers&) = delete;
  RunObservers& operator=(const RunObservers&) = delete;

  // (Re)opens worker_phases.jsonl cut after `step`: the run starts, resumes or is
  // restored at `step`.
  void restart_at(int64_t step);
  // Before metrics.jsonl gets the step's row: each worker's command times of the step go
  // to worker_phases.jsonl and the stragglers among them into `row` (perf/stragglers).
  void observe_workers(int64_t step, MetricRow& row);
  // After it: TensorBoard and Prometheus get the row.
  void publish_step(int64_t step, int64_t total_steps, const MetricRow& row);
  // Prometheus' worker gauges (up, restarts, heartbeats, command times).
  void publish_workers();

 private:
  WorkerPool& pool_;
  const LoggingConfig logging_;
  const std::string run_dir_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<PrometheusExporter> prometheus_;
  std::unique_ptr<DashboardServer> dashboard_;
  std::unique_ptr<MetricsWriter> worker_phases_log_;  // worker_phases.jsonl
  StragglerWatch stragglers_;
  WorkerCommandTimes last_command_times_;  // of the newest step
};

}  // namespace tandem
