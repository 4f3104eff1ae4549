#include "agent/python_tool.h"

#include "core/error.h"
#include "core/process.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>

namespace tandem {

namespace {

using Clock = std::chrono::steady_clock;

// How long a worker may take to start and import the file.
constexpr double kStartupSeconds = 120;

struct ToolProcess {
  ChildProcess process;
  int to_child = -1;
  int from_child = -1;
  std::string received;  // bytes read, not yet a whole line

  void close_pipes() {
    for (int* fd : {&to_child, &from_child}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
    received.clear();
  }
};

// The next whole line from the worker before `deadline`; nullopt at the deadline;
// throws ToolUnavailable when its output closed (it died).
std::optional<std::string> read_line(ToolProcess& p, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    if (const size_t newline = p.received.find('\n'); newline != std::string::npos) {
      std::string line = p.received.substr(0, newline);
      p.received.erase(0, newline + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd fd{p.from_child, POLLIN, 0};
    const int ready = ::poll(&fd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready < 0 && errno != EINTR) throw ToolUnavailable(fmt::format("{}: poll failed: {}", what, std::strerror(errno)));
    if (ready <= 0) continue;
    char buffer[65536];
    const ssize_t n = ::read(p.from_child, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      const std::optional<ExitStatus> status = p.process.wait_for(5.0);
      throw ToolUnavailable(fmt::format("{}: the tool's worker process ended ({})", what,
                                        status ? status->describe() : std::string("closed its output")));
    }
    p.received.append(buffer, static_cast<size_t>(n));
  }
}

class PythonFunctionTool : public Tool {
 public:
  explicit PythonFunctionTool(const PythonFunctionToolOptions& options)
      : options_(options),
        binary_(options.tandem_binary.empty() ? current_executable() : options.tandem_binary),
        what_(fmt::format("tool {} ({}:{})", options.name.empty() ? options.function : options.name, options.file,
                          options.function)) {
    TANDEM_CHECK(options.workers > 0, "{}: workers must be positive", what_);
    processes_.resize(static_cast<size_t>(options.workers));
    for (size_t i = 0; i < processes_.size(); ++i) {
      nlohmann::ordered_json hello = start(processes_[i]);
      if (i == 0) schema_ = hello["schema"];
      idle_.push_back(i);
    }
    if (options.parameters.is_object() && !options.parameters.empty()) schema_["function"]["parameters"] = options.parameters;
    if (!options.description.empty()) schema_["function"]["description"] = options.description;
  }

  ~PythonFunctionTool() override {
    for (ToolProcess& p : processes_) {
      p.close_pipes();  // end of input: an idle worker exits by itself
      if (!p.process.wait_for(2.0)) p.process.kill_and_reap();
    }
  }

  std::string name() const override { return schema_["function"]["name"].get<std::string>(); }
  nlohmann::ordered_json schema() const override { return schema_; }

  ToolResult call(const nlohmann::json& arguments) override {
    size_t slot = take_idle();
    ToolProcess& p = processes_[slot];
    ToolResult result;
    try {
      const std::string line = nlohmann::json{{"arguments", arguments}}.dump(-1, ' ', false,
                                                                             nlohmann::json::error_handler_t::replace) + "\n";
      if (!write_all(p.to_child, line)) throw ToolUnavailable(fmt::format("{}: the tool's worker process is gone", what_));
      const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(options_.timeout_s));
      const std::optional<std::string> reply = read_line(p, deadline, what_);
      if (!reply) {
        replace(p);
        result.error = true;
        result.stop = "tool_timeout";
        result.observation = fmt::format("Error: the tool did not answer within {} s", options_.timeout_s);
      } else {
        const nlohmann::json answer = nlohmann::json::parse(*reply, nullptr, false);
        if (answer.is_object() && answer.contains("output")) {
          result.observation = answer["output"].get<std::string>();
        } else if (answer.is_object() && answer.contains("error")) {
          result.error = true;
          result.observation = "Error: " + answer["error"].get<std::string>();
        } else {  // the catch below replaces the worker
          throw ToolUnavailable(fmt::format("{}: the tool's worker sent an unreadable answer: {}", what_, reply->substr(0, 200)));
        }
      }
    } catch (const ToolUnavailable&) {
      replace(p);
      give_back(slot);
      throw;
    }
    give_back(slot);
    return result;
  }

 private:
  nlohmann::ordered_json start(ToolProcess& p) {
    std::vector<std::string> argv = {binary_, "tool-worker", "--file", options_.file, "--function", options_.function};
    if (!options_.name.empty()) argv.insert(argv.end(), {"--name", options_.name});
    for (const std::string& directory : options_.search_path) argv.insert(argv.end(), {"--path", directory});
    PipedChild child = spawn_piped(argv, options_.log_path);
    p.process = std::move(child.process);
    p.to_child = child.to_child;
    p.from_child = child.from_child;
    std::optional<std::string> hello;
    try {
      const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(kStartupSeconds));
      hello = read_line(p, deadline, what_);
    } catch (const ToolUnavailable& e) {
      throw Error(e.what());
    }
    if (!hello) throw Error(fmt::format("{}: the tool worker did not import the file within {} s", what_, kStartupSeconds));
    const nlohmann::ordered_json message = nlohmann::ordered_json::parse(*hello, nullptr, false);
    if (message.is_object() && message.value("ready", false) && message.contains("schema")) return message;
    if (message.is_object() && message.contains("error")) {
      throw Error(fmt::format("{}: {}", what_, message["error"].get<std::string>()));
    }
    throw Error(fmt::format("{}: the tool worker's first line is not its ready message: {}", what_, hello->substr(0, 200)));
  }

  // Kills the worker and starts a fresh one in its place (a failed start leaves the slot
  // dead: its next call is ToolUnavailable).
  void replace(ToolProcess& p) {
    p.process.kill_and_reap();
    p.close_pipes();
    try {
      start(p);
    } catch (const Error&) {
    }
  }

  static bool write_all(int fd, const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  size_t take_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_ready_.wait(lock, [&] { return !idle_.empty(); });
    const size_t slot = idle_.back();
    idle_.pop_back();
    return slot;
  }

  void give_back(size_t slot) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      idle_.push_back(slot);
    }
    idle_ready_.notify_one();
  }

  PythonFunctionToolOptions options_;
  std::string binary_;
  std::string what_;
  nlohmann::ordered_json schema_;
  std::vector<ToolProcess> processes_;
  std::mutex mutex_;
  std::condition_variable idle_ready_;
  std::vector<size_t> idle_;
};

}  // namespace

std::shared_ptr<Tool> make_python_function_tool(const PythonFunctionToolOptions& options) {
  return std::make_shared<PythonFunctionTool>(options);
}

}  // namespace tandem
