// bench/control_plane: controller <-> worker round trips through tandem's control plane
// (Cap'n Proto over ZeroMQ, real worker processes, heartbeats running), against a raw
// ZeroMQ ROUTER/DEALER echo over the same loopback transport in the same run.
//
// Prints one JSON line per (implementation, worker count) and one with the ratios.
// Usage: control_plane [--tandem PATH] [--workers 1,4,16] [--seconds S]
#include "controller/workers/worker_pool.h"
#include "core/files.h"
#include "core/text.h"

#include <fmt/format.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

struct Figures {
  double p50_us = 0, p99_us = 0, messages_per_s = 0;
};

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Times single round trips (`one(i)` does the i-th) for `seconds` after 200 warm-up ones.
template <class RoundTrip>
void measure_latency(double seconds, Figures& f, RoundTrip one) {
  for (size_t i = 0; i < 200; ++i) one(0);
  std::vector<double> rtt;
  auto start = Clock::now();
  while (seconds_since(start) < seconds) {
    auto t = Clock::now();
    one(rtt.size());
    rtt.push_back(seconds_since(t) * 1e6);
  }
  f.p50_us = percentile(rtt, 0.5);
  f.p99_us = percentile(rtt, 0.99);
}

const std::string payload(64, 'p');
constexpr int window = 32;  // requests in flight per worker for the throughput figure

Figures bench_tandem(const std::string& binary, int workers, double seconds) {
  TempDir logs("tandem-bench-");
  PoolOptions options;
  options.bind_address = "tcp://127.0.0.1:*";
  options.log_dir = logs.path();
  options.heartbeat_timeout_s = 30;
  WorkerPool pool(options, make_local_launcher(binary));
  std::vector<WorkerId> ids;
  for (int r = 0; r < workers; ++r) ids.push_back({"rollout", static_cast<uint32_t>(r)});
  pool.start(ids);

  Figures f;
  measure_latency(seconds / 2, f, [&](size_t i) { pool.wait({pool.send(ids[i % ids.size()], "ping", payload)}); });

  uint64_t done = 0;
  auto start = Clock::now();
  while (seconds_since(start) < seconds / 2) {
    std::vector<uint64_t> requests;
    for (int k = 0; k < window; ++k)
      for (const auto& id : ids) requests.push_back(pool.send(id, "ping", payload));
    done += pool.wait(requests).size();
  }
  f.messages_per_s = static_cast<double>(done) / seconds_since(start);
  pool.shutdown("bench done");
  return f;
}

Figures bench_raw_zmq(int workers, double seconds) {
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  std::string address = router.get(zmq::sockopt::last_endpoint);
  std::atomic<bool> stop{false};
  std::vector<std::thread> echoes;
  for (int w = 0; w < workers; ++w) {
    echoes.emplace_back([&, w] {
      zmq::socket_t dealer(context, zmq::socket_type::dealer);
      dealer.set(zmq::sockopt::linger, 0);
      dealer.set(zmq::sockopt::routing_id, fmt::format("w{}", w));
      dealer.connect(address);
      dealer.send(zmq::str_buffer("hello"), zmq::send_flags::none);
      while (!stop) {
        zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(50));
        zmq::message_t m;
        while (dealer.recv(m, zmq::recv_flags::dontwait)) dealer.send(m, zmq::send_flags::none);
      }
    });
  }
  std::vector<std::string> peers;
  while (static_cast<int>(peers.size()) < workers) {
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(router, std::back_inserter(frames));
    peers.push_back(frames[0].to_string());
  }
  auto round_trip = [&](const std::string& peer) {
    router.send(zmq::buffer(peer), zmq::send_flags::sndmore);
    router.send(zmq::buffer(payload), zmq::send_flags::none);
  };
  auto receive_one = [&] {
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(router, std::back_inserter(frames));
  };

  Figures f;
  measure_latency(seconds / 2, f, [&](size_t i) {
    round_trip(peers[i % peers.size()]);
    receive_one();
  });

  uint64_t done = 0;
  auto start = Clock::now();
  while (seconds_since(start) < seconds / 2) {
    for (int k = 0; k < window; ++k)
      for (const auto& p : peers) round_trip(p);
    for (size_t k = 0; k < window * peers.size(); ++k) receive_one();
    done += window * peers.size();
  }
  f.messages_per_s = static_cast<double>(done) / seconds_since(start);
  stop = true;
  for (auto& t : echoes) t.join();
  return f;
}

void print(const char* impl, int workers, const Figures& f) {
  fmt::print("{{\"bench\":\"control_plane\",\"impl\":\"{}\",\"workers\":{},\"rtt_p50_us\":{:.1f},"
             "\"rtt_p99_us\":{:.1f},\"round_trips_per_s\":{:.0f}}}\n",
             impl, workers, f.p50_us, f.p99_us, f.messages_per_s);
}

}  // namespace

int main(int argc, char** argv) {
  std::string binary = TANDEM_BINARY;
  std::string worker_list = "1,4,16";
  double seconds = 4.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--tandem") binary = argv[i + 1];
    else if (flag == "--workers") worker_list = argv[i + 1];
    else if (flag == "--seconds") seconds = std::stod(argv[i + 1]);
    else {
      fmt::print(stderr, "unknown flag {} (known: --tandem, --workers, --seconds)\n", flag);
      return 2;
    }
  }
  for (const std::string& n : split(worker_list, ',')) {
    int workers = std::stoi(n);
    Figures raw = bench_raw_zmq(workers, seconds);
    Figures ours = bench_tandem(binary, workers, seconds);
    print("raw_zmq", workers, raw);
    print("tandem", workers, ours);
    fmt::print("{{\"bench\":\"control_plane\",\"workers\":{},\"ratio_rtt_p50\":{:.2f},\"ratio_rtt_p99\":{:.2f},"
               "\"ratio_round_trips_per_s\":{:.2f}}}\n",
               workers, ours.p50_us / raw.p50_us, ours.p99_us / raw.p99_us, ours.messages_per_s / raw.messages_per_s);
    std::fflush(stdout);
  }
  return 0;
}
