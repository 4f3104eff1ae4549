// logging.prometheus: the controller's /metrics endpoint for a Prometheus server to
// scrape. Debian's prometheus-cpp (core) writes the exposition text; cpp-httplib serves it
// on a thread of its own. Not prometheus-cpp's civetweb Exposer: Debian's civetweb starts
// its threads with a fixed 100 KiB stack, and glibc refuses such a stack (EINVAL) once the
// static TLS of the libraries tandem loads (cuBLASLt ~92 KiB, libtorch's OpenBLAS and glog)
// does not fit in it, so the Exposer throws "null context ... binding to port" in tandem
// while it works in a small program.
//
// Serves every numeric metric of the newest step as a gauge `tandem_<key>` (characters
// outside [a-zA-Z0-9_] become "_"), the step, and each worker's health: up, restarts,
// heartbeat age (computed at scrape time), and the seconds its commands took in the newest
// step. Threading: the training loop publishes while scrapes read on the server's thread;
// one mutex in the snapshot guards both, and a scrape sees whole publishes.
#pragma once

#include "controller/run/metrics_writer.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct PrometheusWorker {          // one worker's health, as the controller sees it
  std::string name;                // "rollout-0"
  std::string role;                // "rollout" | "learner" | "colocated"
  int64_t rank = 0;
  std::string hostname;
  bool up = false;                 // registered and not failed
  int64_t restarts = 0;
  double last_heartbeat_unix = 0;  // 0: none yet; the age is computed at scrape time
  std::map<std::string, double> command_seconds;  // the newest step's seconds per command
};

// The Prometheus name of a metric key: "tandem_" + the key with each character outside
// [a-zA-Z0-9_] turned into "_" ("reward/mean" -> "tandem_reward_mean"); a trailing "_s"
// becomes "_seconds", "_per_s" "_per_second", and "_count", "_sum", "_bucket" and "_total"
// (suffixes Prometheus keeps for histograms, summaries and counters) get "_value" added.
std::string prometheus_metric_name(const std::string& key);

class PrometheusExporter {
 public:
  // Listens on bind:port (0: any free port). Throws Error naming the address when it cannot.
  PrometheusExporter(const std::string& bind, int64_t port);
  ~PrometheusExporter();
  PrometheusExporter(const PrometheusExporter&) = delete;
  PrometheusExporter& operator=(const PrometheusExporter&) = delete;

  int port() const { return port_; }
  void publish_step(int64_t step, int64_t steps, const MetricRow& row);
  void publish_workers(const std::vector<PrometheusWorker>& workers);

  class Snapshot;  // what scrapes read (prometheus_exporter.cpp)
  // The exposition text of everything published so far (what GET /metrics answers).
  std::string metrics_text() const;

 private:
  struct Server;
  std::shared_ptr<Snapshot> snapshot_;
  std::unique_ptr<Server> server_;
  int port_ = 0;
};

}  // namespace tandem
