// The exporter's text and names, without a Prometheus server (test_prometheus.py has one).
#include "controller/prometheus_exporter.h"
#include "controller/run_status.h"
#include "core/error.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>

using namespace tandem;

TEST_CASE("metric keys become valid Prometheus names") {
  CHECK(prometheus_metric_name("reward/mean") == "tandem_reward_mean");
  CHECK(prometheus_metric_name("reward/math answer/found") == "tandem_reward_math_answer_found");
  CHECK(prometheus_metric_name("time/step_s") == "tandem_time_step_seconds");
  CHECK(prometheus_metric_name("perf/train_tokens_per_s") == "tandem_perf_train_tokens_per_second");
  CHECK(prometheus_metric_name("response/count") == "tandem_response_count_value");
  CHECK(prometheus_metric_name("val/pass@4") == "tandem_val_pass_4");
}

TEST_CASE("the exposition text has the step, every metric, and worker health with live heartbeat ages") {
  PrometheusExporter exporter("127.0.0.1", 0);
  CHECK(exporter.port() > 0);
  std::mt19937 rng(std::random_device{}());
  const double reward = std::uniform_real_distribution<double>(0, 1)(rng);
  exporter.publish_step(7, 100, {{"step", 7}, {"reward/mean", reward}, {"reward/mean", 5.0}, {"actor/kl", NAN}});
  PrometheusWorker w;
  w.name = "rollout-1";
  w.role = "rollout";
  w.rank = 1;
  w.hostname = "h";
  w.up = true;
  w.restarts = 2;
  w.last_heartbeat_unix = unix_now() - 3.0;
  w.command_seconds = {{"rollout_generate", 0.25}};
  exporter.publish_workers({w});
  const std::string text = exporter.metrics_text();
  CAPTURE(text);
  CHECK(text.find("tandem_step 7") != std::string::npos);
  CHECK(text.find("tandem_steps 100") != std::string::npos);
  CHECK(text.find("tandem_steps_done_total 7") != std::string::npos);
  CHECK(text.find(fmt::format("tandem_reward_mean {}", reward).substr(0, 22)) != std::string::npos);
  CHECK(text.find("tandem_reward_mean 5") == std::string::npos);  // the second key of one name is left out
  CHECK(text.find("tandem_actor_kl Nan") != std::string::npos);  // prometheus-cpp's spelling; Prometheus parses it
  CHECK(text.find("# HELP tandem_reward_mean metrics.jsonl key reward/mean") != std::string::npos);
  CHECK(text.find("tandem_worker_up{worker=\"rollout-1\",role=\"rollout\",rank=\"1\",host=\"h\"} 1") != std::string::npos);
  CHECK(text.find("tandem_worker_restarts_total{worker=\"rollout-1\"} 2") != std::string::npos);
  CHECK(text.find("tandem_worker_command_seconds{worker=\"rollout-1\",command=\"rollout_generate\"} 0.25") !=
        std::string::npos);
  const size_t age_at = text.find("tandem_worker_heartbeat_age_seconds{worker=\"rollout-1\"} ");
  REQUIRE(age_at != std::string::npos);
  const double age = std::stod(text.substr(text.find("} ", age_at) + 2));
  CHECK(age >= 3.0);
  CHECK(age < 30.0);

  // A taken port is a clear error.
  const std::string expected = fmt::format("cannot listen on 127.0.0.1:{}", exporter.port());
  CHECK_THROWS_WITH_AS(PrometheusExporter("127.0.0.1", exporter.port()), doctest::Contains(expected.c_str()), Error);
}
