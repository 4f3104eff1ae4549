// Local launcher: one child process per worker, `tandem worker ...`.
#include "controller/launch/launcher.h"

#include "core/error.h"
#include "core/log.h"
#include "core/math_environment.h"
#include "core/text.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>

namespace tandem {
namespace {

class LocalLauncher : public Launcher {
 public:
  explicit LocalLauncher(std::string binary) : binary_(std::move(binary)) {}
  ~LocalLauncher() override { stop_all(0.0); }

  int launch(const LaunchRequest& r) override {
    SpawnOptions options;
    options.output_path = r.log_path;
    options.environment = worker_environment(r);
    for (const std::string& setting : r.computes_alone ? alone_math_environment_ : math_environment_) {
      options.environment.push_back(setting);
    }
    ChildProcess child = ChildProcess::spawn(worker_argv(binary_, r), options);
    int pid = child.pid();
    log::debug("launched {} as pid {}", r.id.name(), pid);
    children_[r.id] = std::move(child);
    return pid;
  }

  std::vector<std::pair<WorkerId, ExitStatus>> reap() override {
    std::vector<std::pair<WorkerId, ExitStatus>> ended;
    for (auto& [id, child] : children_) {
      bool was_running = child.running();
      auto status = child.poll();
      if (was_running && status) ended.emplace_back(id, *status);
    }
    return ended;
  }

  void send_signal(const WorkerId& id, int signal) override {
    auto it = children_.find(id);
    if (it != children_.end()) it->second.send_signal(signal);
  }

  void stop_all(double grace_s) override {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    for (auto& [id, child] : children_) {
      while (child.running() && !child.poll() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (child.running()) {
        log::warn("{} (pid {}) did not exit in time: killing it", id.name(), child.pid());
        child.kill_and_reap();
      }
    }
  }

 private:
  std::string binary_;
  std::map<WorkerId, ChildProcess> children_;
  const std::vector<std::string> math_environment_ = missing_math_environment();
  const std::vector<std::string> alone_math_environment_ = missing_math_environment(true);
};

// Workers started by someone else: their command lines go to a file, and their ends show
// as missed heartbeats (the pool kills nothing it did not start).
class ExternalLauncher : public Launcher {
 public:
  ExternalLauncher(std::string binary, std::string commands_path)
      : binary_(std::move(binary)), commands_path_(std::move(commands_path)) {}

  int launch(const LaunchRequest& r) override {
    std::vector<std::string> argv = worker_argv(binary_, r);
    if (!r.keys_path.empty()) {
      argv.push_back("--keys");
      argv.push_back(r.keys_path);
    }
    std::string line;
    for (const std::string& part : argv) line += (line.empty() ? "" : " ") + shell_quote(part);
    if (!written_.count(r.id)) {
      std::ofstream(commands_path_, std::ios::app) << line << "\n";
      written_.insert(r.id);
    }
    log::info("waiting for {} to be started elsewhere: {}", r.id.name(), line);
    return 0;
  }
  std::vector<std::pair<WorkerId, ExitStatus>> reap() override { return {}; }
  void send_signal(const WorkerId&, int) override {}
  void stop_all(double) override {}

 private:
  std::string binary_;
  std::string commands_path_;
  std::set<WorkerId> written_;
};

}  // namespace

std::vector<std::string> worker_argv(const std::string& binary, const LaunchRequest& r) {
  return {
      binary, "worker",
      "--role", r.id.role,
      "--rank", std::to_string(r.id.rank),
      "--controller", r.controller_address,
      "--heartbeat-interval", fmt::format("{}", r.heartbeat_interval_s),
      "--controller-timeout", fmt::format("{}", r.controller_timeout_s),
      "--max-message-bytes", std::to_string(r.max_message_bytes),
      "--log-file", r.log_path,
  };
}

std::vector<std::string> worker_environment(const LaunchRequest& r) {
  if (r.keys_path.empty()) return {};
  return {"TANDEM_WORKER_KEYS=" + r.keys_path};
}

std::unique_ptr<Launcher> make_external_launcher(const std::string& tandem_binary, const std::string& commands_path) {
  return std::make_unique<ExternalLauncher>(tandem_binary, commands_path);
}

std::unique_ptr<Launcher> make_local_launcher(const std::string& tandem_binary) {
  return std::make_unique<LocalLauncher>(tandem_binary);
}

}  // namespace tandem
