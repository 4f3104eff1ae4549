#include "controller/observe/http_serving.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <vector>

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

// httplib's ThreadPool with a bound: enqueue() (called by the accept loop with each
// accepted socket) waits while `most` connections are queued or being served, so the
// accept loop stops accepting and further clients wait in the kernel's backlog.
class BoundedPool : public httplib::TaskQueue {
 public:
  BoundedPool(size_t threads, size_t most) : most_(most) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  ~BoundedPool() override = default;

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mutex_);
    room_.wait(lock, [this] { return shutdown_ || jobs_.size() + busy_ < most_; });
    jobs_.push_back(std::move(fn));  // after shutdown too: the job closes its socket
    work_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shutdown_ = true;
    }
    work_.notify_all();
    room_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void work() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [this] { return shutdown_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // shut down, nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
        ++busy_;
      }
      job();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --busy_;
      }
      room_.notify_one();
    }
  }

  const size_t most_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable work_, room_;
  std::deque<std::function<void()>> jobs_;
  size_t busy_ = 0;
  bool shutdown_ = false;
};

// The local port of a connected (not listening) TCP socket, or -1.
int connected_port(int fd) {
  int listening = 0;
  socklen_t size = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || listening) return -1;
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return -1;
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  return -1;
}

}  // namespace

void HttpServing::refuse_shared_ports(httplib::Server& http) {
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
}

int HttpServing::start(httplib::Server& http, const std::string& bind, int port, const HttpLimits& limits) {
  http.new_task_queue = [limits] { return new BoundedPool(limits.threads, limits.max_connections); };
  const auto read_timeout = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(limits.read_timeout_s));
  http.set_read_timeout(read_timeout);
  http.set_payload_max_length(64 * 1024);
  const int bound = port == 0 ? http.bind_to_any_port(bind) : (http.bind_to_port(bind, port) ? port : -1);
  if (bound <= 0) return -1;
  http_ = &http;
  ended_ = false;
  stopping_ = false;
  finished_ = false;
  thread_ = std::thread([this] {
    http_->listen_after_bind();
    ended_ = true;
  });
  watchdog_ = std::thread([this, bound, limits] { watch_connections(bound, limits.max_connection_s); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!http.is_running() && !ended_ && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return bound;
}

void HttpServing::watch_connections(int port, double max_connection_s) {
  // Once a second (the limits are tens of seconds): sockets are told apart by inode (a
  // descriptor number is reused); each is looked at through a dup of its descriptor, so
  // what is shut down is the socket that was checked.
  std::map<ino_t, Clock::time_point> first_seen;
  const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(max_connection_s));
  std::unique_lock<std::mutex> lock(watchdog_mutex_);
  while (!watchdog_wake_.wait_for(lock, std::chrono::milliseconds(stopping_ ? 20 : 1000), [this] { return finished_; })) {
    std::map<ino_t, Clock::time_point> seen;
    const Clock::time_point now = Clock::now();
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      int fd = -1;
      try {
        fd = std::stoi(entry.path().filename().string());
      } catch (const std::exception&) {
        continue;
      }
      const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
      if (copy < 0) continue;
      struct stat info {};
      if (::fstat(copy, &info) == 0 && S_ISSOCK(info.st_mode) && connected_port(copy) == port) {
        auto known = first_seen.find(info.st_ino);
        const Clock::time_point since = known == first_seen.end() ? now : known->second;
        // While the server stops, every connection is cut: stop() must not wait for a client.
        if (stopping_ || now - since > limit) {
          ::shutdown(copy, SHUT_RDWR);  // its request thread's next read or write fails: it closes
        } else {
          seen[info.st_ino] = since;
        }
      }
      ::close(copy);
    }
    first_seen = std::move(seen);
  }
}

void HttpServing::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(watchdog_mutex_);
    stopping_ = true;
  }
  http_->stop();
  thread_.join();  // the watchdog meanwhile cuts what would hold the request threads
  {
    std::lock_guard<std::mutex> lock(watchdog_mutex_);
    finished_ = true;
  }
  watchdog_wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

}  // namespace tandem
