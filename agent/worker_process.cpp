#include "agent/worker_process.h"

#include "agent/tool.h"
#include "core/error.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem {

WorkerProcess::Clock::time_point deadline_in(double seconds) {
  return WorkerProcess::Clock::now() +
         std::chrono::duration_cast<WorkerProcess::Clock::duration>(std::chrono::duration<double>(seconds));
}

nlohmann::ordered_json WorkerProcess::start(const std::vector<std::string>& argv, const std::string& log_path,
                                            double startup_s, const std::string& what) {
  stop();
  PipedChild child = spawn_piped(argv, log_path);
  process_ = std::move(child.process);
  to_child_ = child.to_child;
  from_child_ = child.from_child;
  std::optional<std::string> hello;
  try {
    hello = read_line(deadline_in(startup_s), what);
  } catch (const ToolUnavailable& e) {
    throw Error(e.what());
  }
  if (!hello) throw Error(fmt::format("{}: the worker did not start (import the file) within {} s", what, startup_s));
  const nlohmann::ordered_json message = nlohmann::ordered_json::parse(*hello, nullptr, false);
  if (message.is_object() && message.value("ready", false)) return message;
  if (message.is_object() && message.contains("error") && message["error"].is_string()) {
    throw Error(fmt::format("{}: {}", what, message["error"].get<std::string>()));
  }
  throw Error(fmt::format("{}: the worker's first line is not its ready message: {}", what, hello->substr(0, 200)));
}

bool WorkerProcess::send(const nlohmann::json& message) {
  if (to_child_ < 0) return false;
  const std::string data = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(to_child_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::optional<std::string> WorkerProcess::read_line(Clock::time_point deadline, const std::string& what) {
  for (;;) {
    if (const size_t newline = received_.find('\n'); newline != std::string::npos) {
      std::string line = received_.substr(0, newline);
      received_.erase(0, newline + 1);
      return line;
    }
    if (from_child_ < 0) throw ToolUnavailable(fmt::format("{}: the worker process is gone", what));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd fd{from_child_, POLLIN, 0};
    const int ready = ::poll(&fd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready < 0 && errno != EINTR) throw ToolUnavailable(fmt::format("{}: poll failed: {}", what, std::strerror(errno)));
    if (ready <= 0) continue;
    char buffer[65536];
    const ssize_t n = ::read(from_child_, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      const std::optional<ExitStatus> status = process_.wait_for(5.0);
      throw ToolUnavailable(fmt::format("{}: the worker process ended ({})", what,
                                        status ? status->describe() : std::string("closed its output")));
    }
    received_.append(buffer, static_cast<size_t>(n));
  }
}

void WorkerProcess::close_pipes() {
  for (int* fd : {&to_child_, &from_child_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  received_.clear();
}

void WorkerProcess::stop() {
  if (to_child_ < 0 && from_child_ < 0) return;
  close_pipes();  // end of input: an idle worker exits by itself
  if (!process_.wait_for(2.0)) process_.kill_and_reap();
}

void WorkerProcess::kill() {
  if (to_child_ < 0 && from_child_ < 0) return;
  process_.kill_and_reap();
  close_pipes();
}

}  // namespace tandem
