// Serving a cpp-httplib server on a thread of its own: what the dashboard and the
// Prometheus endpoint share, with the limits that keep a careless or hostile client from
// hurting the run that serves it:
// - connections: at most `max_connections` accepted and open at once; more wait in the
//   kernel's listen backlog (they hold no descriptor of ours), so thousands of idle
//   clients cannot exhaust the controller's file descriptors;
// - time: a read waits at most `read_timeout_s` for the next bytes, and a connection is
//   cut after `max_connection_s` however it behaves (a client trickling a byte at a time
//   cannot hold a request thread), watched by a thread that shuts such sockets down;
// - size: a request body over 64 KiB is refused (the endpoints take none).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace tandem {

struct HttpLimits {
  size_t threads = 4;
  size_t max_connections = 32;
  double read_timeout_s = 1.0;
  double max_connection_s = 30.0;
};

class HttpServing {
 public:
  // Sets SO_REUSEADDR without httplib's default SO_REUSEPORT: a port another server
  // holds is an error, not a port silently shared with it. Call before start().
  static void refuse_shared_ports(httplib::Server& http);

  HttpServing() = default;
  ~HttpServing() { stop(); }
  HttpServing(const HttpServing&) = delete;
  HttpServing& operator=(const HttpServing&) = delete;

  // Applies `limits` to `http`, binds bind:port (0: any free port) and serves on a new
  // thread until stop(). Returns the port, or -1 when it cannot bind. Returns once the
  // server runs (or has ended), so that a stop() right after cannot be missed.
  int start(httplib::Server& http, const std::string& bind, int port, const HttpLimits& limits = {});
  bool serving() const { return thread_.joinable(); }
  // Stops the server and joins its threads. Idempotent.
  void stop();

 private:
  // Shuts down this server's connections older than max_connection_s, until stop().
  void watch_connections(int port, double max_connection_s);

  httplib::Server* http_ = nullptr;
  std::thread thread_;
  std::atomic<bool> ended_{false};  // listen_after_bind returned
  std::thread watchdog_;
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_wake_;
  bool stopping_ = false;  // stop() began: cut every connection
  bool finished_ = false;  // the server has stopped: the watchdog ends
};

}  // namespace tandem
