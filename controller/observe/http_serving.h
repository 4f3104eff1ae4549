// Serving a cpp-httplib server on a thread of its own: what the dashboard and the
// Prometheus endpoint share.
#pragma once

#include <atomic>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace tandem {

class HttpServing {
 public:
  // Sets SO_REUSEADDR without httplib's default SO_REUSEPORT: a port another server
  // holds is an error, not a port silently shared with it. Call before start().
  static void refuse_shared_ports(httplib::Server& http);

  HttpServing() = default;
  ~HttpServing() { stop(); }
  HttpServing(const HttpServing&) = delete;
  HttpServing& operator=(const HttpServing&) = delete;

  // Binds bind:port (0: any free port) and serves on a new thread until stop(). Returns
  // the port, or -1 when it cannot bind. Returns once the server runs (or has ended), so
  // that a stop() right after cannot be missed.
  int start(httplib::Server& http, const std::string& bind, int port);
  bool serving() const { return thread_.joinable(); }
  // Stops the server and joins its thread. Idempotent.
  void stop();

 private:
  httplib::Server* http_ = nullptr;
  std::thread thread_;
  std::atomic<bool> ended_{false};  // listen_after_bind returned
};

}  // namespace tandem
