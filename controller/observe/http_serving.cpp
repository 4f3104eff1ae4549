#include "controller/observe/http_serving.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>

namespace tandem {

void HttpServing::refuse_shared_ports(httplib::Server& http) {
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
}

int HttpServing::start(httplib::Server& http, const std::string& bind, int port) {
  const int bound = port == 0 ? http.bind_to_any_port(bind) : (http.bind_to_port(bind, port) ? port : -1);
  if (bound <= 0) return -1;
  http_ = &http;
  ended_ = false;
  thread_ = std::thread([this] {
    http_->listen_after_bind();
    ended_ = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!http.is_running() && !ended_ && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return bound;
}

void HttpServing::stop() {
  if (!thread_.joinable()) return;
  http_->stop();
  thread_.join();
}

}  // namespace tandem
