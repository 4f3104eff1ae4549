#include "controller/observe/prometheus_exporter.h"

#include "controller/observe/http_serving.h"
#include "controller/run/run_status.h"
#include "core/error.h"
#include "core/log.h"

#include <httplib.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <set>
#include <sstream>

namespace tandem {

std::string prometheus_metric_name(const std::string& key) {
  std::string name = "tandem_";
  for (char ch : key) {
    const bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
    name += keep ? ch : '_';
  }
  // Prometheus' naming rules (promtool check metrics): whole units, and no suffix that
  // histograms and summaries own.
  auto ends_with = [&name](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with("_per_s")) {
    name += "econd";  // _per_second
  } else if (ends_with("_s")) {
    name += "econds";  // _seconds
  } else if (ends_with("_count") || ends_with("_sum") || ends_with("_bucket") || ends_with("_total")) {
    name += "_value";
  }
  return name;
}

// The newest step and worker health, copied in by the training loop and read by scrapes
// on prometheus-cpp's threads.
class PrometheusExporter::Snapshot : public prometheus::Collectable {
 public:
  void set_step(int64_t step, int64_t steps, const MetricRow& row) {
    std::lock_guard<std::mutex> lock(mutex_);
    step_ = step;
    steps_ = steps;
    steps_done_ = std::max(steps_done_, step);
    row_.clear();
    std::set<std::string> names;
    for (const auto& [key, value] : row) {
      if (key == "step") continue;
      const std::string name = prometheus_metric_name(key);
      if (!names.insert(name).second) {
        if (warned_.insert(name).second) {
          log::warn("Prometheus: metric {} and an earlier key both map to {}: only the first is exported", key, name);
        }
        continue;
      }
      row_.push_back({key, value});
    }
  }

  void set_workers(const std::vector<PrometheusWorker>& workers) {
    std::lock_guard<std::mutex> lock(mutex_);
    workers_ = workers;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<prometheus::MetricFamily> families;
    families.reserve(row_.size() + 8);  // `family` hands out pointers into it: no reallocation
    auto family = [&](const std::string& name, const std::string& help, prometheus::MetricType type) {
      families.push_back({name, help, type, {}});
      return &families.back();
    };
    auto gauge = [](double value, std::vector<prometheus::ClientMetric::Label> labels = {}) {
      prometheus::ClientMetric m;
      m.label = std::move(labels);
      m.gauge.value = value;
      return m;
    };
    family("tandem_step", "the newest finished step", prometheus::MetricType::Gauge)->metric.push_back(gauge(step_));
    family("tandem_steps", "experiment.steps: the steps the run trains", prometheus::MetricType::Gauge)
        ->metric.push_back(gauge(steps_));
    prometheus::ClientMetric done;
    done.counter.value = static_cast<double>(steps_done_);
    family("tandem_steps_done_total", "steps finished since the controller started (a resumed run counts from its step)",
           prometheus::MetricType::Counter)
        ->metric.push_back(done);
    for (const auto& [key, value] : row_) {
      family(prometheus_metric_name(key), fmt::format("metrics.jsonl key {} at the newest step", key),
             prometheus::MetricType::Gauge)
          ->metric.push_back(gauge(value));
    }
    if (workers_.empty()) return families;
    auto* up = family("tandem_worker_up", "1 while the worker is registered and not failed", prometheus::MetricType::Gauge);
    auto* restarts = family("tandem_worker_restarts_total", "times the worker was restarted",
                            prometheus::MetricType::Counter);
    auto* heartbeat = family("tandem_worker_heartbeat_age_seconds",
                             "seconds since the worker's last heartbeat or message reached the controller",
                             prometheus::MetricType::Gauge);
    auto* commands = family("tandem_worker_command_seconds",
                            "seconds the worker spent on each command in the newest step (send to reply)",
                            prometheus::MetricType::Gauge);
    const double now = unix_now();
    for (const PrometheusWorker& w : workers_) {
      up->metric.push_back(gauge(w.up ? 1 : 0, {{"worker", w.name},
                                                {"role", w.role},
                                                {"rank", std::to_string(w.rank)},
                                                {"host", w.hostname}}));
      prometheus::ClientMetric r;
      r.label = {{"worker", w.name}};
      r.counter.value = static_cast<double>(w.restarts);
      restarts->metric.push_back(r);
      if (w.last_heartbeat_unix > 0) {
        heartbeat->metric.push_back(gauge(std::max(0.0, now - w.last_heartbeat_unix), {{"worker", w.name}}));
      }
      for (const auto& [command, seconds] : w.command_seconds) {
        commands->metric.push_back(gauge(seconds, {{"worker", w.name}, {"command", command}}));
      }
    }
    // A family without samples is not valid exposition text: leave such families out.
    std::vector<prometheus::MetricFamily> out;
    for (auto& f : families) {
      if (!f.metric.empty()) out.push_back(std::move(f));
    }
    return out;
  }

 private:
  mutable std::mutex mutex_;
  int64_t step_ = 0, steps_ = 0, steps_done_ = 0;
  MetricRow row_;
  std::vector<PrometheusWorker> workers_;
  std::set<std::string> warned_;
};

struct PrometheusExporter::Server {
  httplib::Server http;
  HttpServing serving;  // after `http`: stops before it goes
};

PrometheusExporter::PrometheusExporter(const std::string& bind, int64_t port)
    : snapshot_(std::make_shared<Snapshot>()), server_(std::make_unique<Server>()) {
  httplib::Server& http = server_->http;
  HttpServing::refuse_shared_ports(http);
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  HttpLimits limits;
  limits.threads = 2;  // scrapes are rare; two so that one slow client cannot hold the endpoint alone
  limits.max_connections = 8;
  const int bound = server_->serving.start(http, bind, static_cast<int>(port), limits);
  if (bound <= 0) {
    throw Error(fmt::format("logging.prometheus: cannot listen on {}:{}: the port is taken, or {} is not an address "
                            "of this host (port: 0 picks a free one)",
                            bind, port, bind));
  }
  port_ = bound;
}

PrometheusExporter::~PrometheusExporter() = default;

std::string PrometheusExporter::metrics_text() const {
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, snapshot_->Collect());
  return text.str();
}

void PrometheusExporter::publish_step(int64_t step, int64_t steps, const MetricRow& row) {
  snapshot_->set_step(step, steps, row);
}

void PrometheusExporter::publish_workers(const std::vector<PrometheusWorker>& workers) {
  snapshot_->set_workers(workers);
}

}  // namespace tandem
