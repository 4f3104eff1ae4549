// The exporter on 127.0.0.1 without a Prometheus server (test_prometheus.py has one):
// names, the text fetched over HTTP, promtool's lint, scrapes while the loop publishes,
// and a taken port.
#include "controller/observe/prometheus_exporter.h"
#include "controller/run/run_status.h"
#include "core/error.h"
#include "core/process.h"

#include <curl/curl.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

using namespace tandem;

namespace {

// GET http://127.0.0.1:PORT/PATH; the body, or a failed CHECK with curl's reason.
std::string http_get(int port, const std::string& path, long* status = nullptr) {
  CURL* curl = curl_easy_init();
  REQUIRE(curl != nullptr);
  std::string body;
  const std::string url = fmt::format("http://127.0.0.1:{}{}", port, path);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 20L);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t count, void* out) {
    static_cast<std::string*>(out)->append(data, size * count);
    return size * count;
  });
  const CURLcode code = curl_easy_perform(curl);
  long http_status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http_status);
  curl_easy_cleanup(curl);
  INFO("GET ", url, ": ", curl_easy_strerror(code));
  REQUIRE(code == CURLE_OK);
  if (status) *status = http_status;
  return body;
}

std::string temp_dir() {
  std::string pattern = "/tmp/tandem-prom-unit-XXXXXX";
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

// `promtool check metrics < text`: its exit status (3: lint problems) and what it said.
// nullopt when Debian's prometheus package (promtool) is not installed.
std::optional<std::pair<int, std::string>> promtool_check(const std::string& text) {
  const std::string promtool = find_on_path("promtool");
  if (promtool.empty()) return std::nullopt;
  const std::string dir = temp_dir();
  std::ofstream(dir + "/metrics.txt") << text;
  const int input = ::open((dir + "/metrics.txt").c_str(), O_RDONLY);
  REQUIRE(input >= 0);
  SpawnOptions options;
  options.stdin_fd = input;
  options.output_path = dir + "/promtool.out";
  ChildProcess child = ChildProcess::spawn({promtool, "check", "metrics"}, options);
  ::close(input);
  const std::optional<ExitStatus> status = child.wait_for(120);
  REQUIRE_MESSAGE(status.has_value(), "promtool check metrics ran past 120 s");
  std::stringstream said;
  said << std::ifstream(options.output_path).rdbuf();
  std::system(("rm -rf " + dir).c_str());
  return std::make_pair(status->signal ? 128 + status->signal : status->exit_code, said.str());
}

PrometheusWorker rollout_worker(double heartbeat_age_s) {
  PrometheusWorker w;
  w.name = "rollout-1";
  w.role = "rollout";
  w.rank = 1;
  w.hostname = "node-a";
  w.up = true;
  w.restarts = 2;
  w.last_heartbeat_unix = unix_now() - heartbeat_age_s;
  w.command_seconds = {{"rollout_generate", 0.25}, {"weight_sync", 0.5}};
  return w;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("metric keys become valid Prometheus names") {
  CHECK(prometheus_metric_name("reward/mean") == "tandem_reward_mean");
  CHECK(prometheus_metric_name("reward/math answer/found") == "tandem_reward_math_answer_found");
  CHECK(prometheus_metric_name("time/step_s") == "tandem_time_step_seconds");
  CHECK(prometheus_metric_name("perf/train_tokens_per_s") == "tandem_perf_train_tokens_per_second");
  CHECK(prometheus_metric_name("response/count") == "tandem_response_count_value");
  CHECK(prometheus_metric_name("val/pass@4") == "tandem_val_pass_4");
}

TEST_CASE("GET /metrics has the step, every metric and worker health with live heartbeat ages; promtool accepts it") {
  PrometheusExporter exporter("127.0.0.1", 0);
  REQUIRE(exporter.port() > 0);
  std::mt19937 rng(std::random_device{}());
  const double reward = std::uniform_real_distribution<double>(0.01, 1)(rng);
  const double step_s = std::uniform_real_distribution<double>(0.01, 100)(rng);
  exporter.publish_step(7, 100,
                        {{"step", 7},
                         {"reward/mean", reward},
                         {"reward/mean", 5.0},  // a second key of one name: left out
                         {"actor/kl", NAN},
                         {"time/step_s", step_s},
                         {"response/count", 32},
                         {"perf/tokens_per_s", 1234.5}});
  PrometheusWorker learner;
  learner.name = "learner-0";
  learner.role = "learner";
  learner.hostname = "node-b";
  learner.up = false;  // failed; no heartbeat yet: no age is served for it
  exporter.publish_workers({rollout_worker(3.0), learner});

  long status = 0;
  const std::string text = http_get(exporter.port(), "/metrics", &status);
  CAPTURE(text);
  CHECK(status == 200);
  CHECK(has(text, "\ntandem_step 7\n"));
  CHECK(has(text, "\ntandem_steps 100\n"));
  CHECK(has(text, "# TYPE tandem_steps_done_total counter"));
  CHECK(has(text, "\ntandem_steps_done_total 7\n"));
  CHECK(!has(text, "tandem_step{"));  // "step" itself is tandem_step, not a second family
  CHECK(has(text, "# HELP tandem_reward_mean metrics.jsonl key reward/mean"));
  CHECK(has(text, "# TYPE tandem_reward_mean gauge"));
  const size_t reward_at = text.find("\ntandem_reward_mean ");
  REQUIRE(reward_at != std::string::npos);
  CHECK(std::stod(text.substr(reward_at + 20)) == doctest::Approx(reward).epsilon(1e-9));
  CHECK(!has(text, "tandem_reward_mean 5\n"));
  CHECK(has(text, "\ntandem_actor_kl Nan\n"));  // prometheus-cpp's spelling; Prometheus parses it as NaN
  const size_t step_s_at = text.find("\ntandem_time_step_seconds ");
  REQUIRE(step_s_at != std::string::npos);
  CHECK(std::stod(text.substr(step_s_at + 26)) == doctest::Approx(step_s).epsilon(1e-9));
  CHECK(has(text, "# HELP tandem_time_step_seconds metrics.jsonl key time/step_s"));
  CHECK(has(text, "\ntandem_response_count_value 32\n"));
  CHECK(has(text, "\ntandem_perf_tokens_per_second 1234.5\n"));
  CHECK(has(text, "tandem_worker_up{worker=\"rollout-1\",role=\"rollout\",rank=\"1\",host=\"node-a\"} 1\n"));
  CHECK(has(text, "tandem_worker_up{worker=\"learner-0\",role=\"learner\",rank=\"0\",host=\"node-b\"} 0\n"));
  CHECK(has(text, "tandem_worker_restarts_total{worker=\"rollout-1\"} 2\n"));
  CHECK(has(text, "tandem_worker_restarts_total{worker=\"learner-0\"} 0\n"));
  CHECK(has(text, "tandem_worker_command_seconds{worker=\"rollout-1\",command=\"rollout_generate\"} 0.25\n"));
  CHECK(has(text, "tandem_worker_command_seconds{worker=\"rollout-1\",command=\"weight_sync\"} 0.5\n"));
  CHECK(!has(text, "tandem_worker_heartbeat_age_seconds{worker=\"learner-0\"}"));
  // The age is computed when the scrape comes, from the heartbeat's time: at least the 3 s
  // it was old when published.
  const std::string age_prefix = "tandem_worker_heartbeat_age_seconds{worker=\"rollout-1\"} ";
  const size_t age_at = text.find(age_prefix);
  REQUIRE(age_at != std::string::npos);
  const double age = std::stod(text.substr(age_at + age_prefix.size()));
  CHECK(age >= 3.0);
  CHECK(age < 300.0);

  if (auto lint = promtool_check(text)) {
    INFO("promtool check metrics said: ", lint->second);
    CHECK(lint->first == 0);
    // The same lint refuses a counter without _total: a failing promtool fails this test.
    auto bad = promtool_check("# HELP x_count c\n# TYPE x_count counter\nx_count 1\n");
    REQUIRE(bad.has_value());
    CHECK(bad->first != 0);
  } else {
    MESSAGE("promtool (Debian's prometheus package) is not installed: lint not checked");
  }
}

TEST_CASE("an exporter with nothing published yet serves valid text") {
  PrometheusExporter exporter("127.0.0.1", 0);
  const std::string text = http_get(exporter.port(), "/metrics");
  CAPTURE(text);
  CHECK(has(text, "tandem_step 0\n"));
  CHECK(!has(text, "tandem_worker_"));  // no worker families without samples
  if (auto lint = promtool_check(text)) {
    INFO("promtool check metrics said: ", lint->second);
    CHECK(lint->first == 0);
  }
}

TEST_CASE("scrapes while the loop publishes see whole steps") {
  PrometheusExporter exporter("127.0.0.1", 0);
  std::atomic<bool> done{false};
  // Each row carries its step twice ("step" and "check/step"): a scrape that mixed two
  // publishes would show them differing.
  std::thread loop([&] {
    for (int64_t step = 1; !done; ++step) {
      exporter.publish_step(step, 1000000, {{"check/step", static_cast<double>(step)}, {"reward/mean", 0.5}});
      exporter.publish_workers({rollout_worker(0.5)});
    }
  });
  for (int scrape = 0; scrape < 30; ++scrape) {
    const std::string text = http_get(exporter.port(), "/metrics");
    const size_t step_at = text.find("\ntandem_step ");
    const size_t check_at = text.find("\ntandem_check_step ");
    if (step_at == std::string::npos || check_at == std::string::npos) continue;  // before the first publish
    INFO(text);
    CHECK(std::stod(text.substr(step_at + 13)) == std::stod(text.substr(check_at + 19)));
  }
  done = true;
  loop.join();
}

TEST_CASE("a taken port is an error naming the address and logging.prometheus") {
  PrometheusExporter first("127.0.0.1", 0);
  const std::string address = fmt::format("127.0.0.1:{}", first.port());
  try {
    PrometheusExporter second("127.0.0.1", first.port());
    FAIL("a second exporter listened on the taken ", address);
  } catch (const Error& e) {
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(has(message, address));
    CHECK(has(message, "logging.prometheus"));
  }
  // The first still answers.
  CHECK(has(http_get(first.port(), "/metrics"), "tandem_step"));
}
