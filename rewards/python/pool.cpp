#include "rewards/python/pool.h"

#include "core/process.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/signals.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>

namespace tandem {

namespace {

// How long a worker may take to import the reward file (numpy, sympy, a model...).
constexpr double kStartupSeconds = 120.0;
// The longest wait between looks at interrupts, deadlines and process counts.
constexpr int64_t kPollMs = 200;

// Ctrl-C or SIGTERM: a call in progress is not waited for (the workers are killed when
// the pool is destroyed, right after the controller's loop unwinds).
void throw_if_interrupted() {
  if (const int signal = pending_interrupt()) throw Interrupted(signal);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Writes all of `text`; false when the reader is gone.
bool write_all(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::write(fd, text.data() + sent, text.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

RewardOutcome outcome_from_line(const std::string& line) {
  RewardOutcome outcome;
  const nlohmann::json reply = nlohmann::json::parse(line, nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) {
    outcome.error = "the reward worker sent an unreadable reply: " + line.substr(0, 200);
  } else if (reply.contains("error")) {
    outcome.error = reply["error"].get<std::string>();
  } else if (!reply.contains("score")) {
    outcome.error = "the reward worker sent a reply without a score: " + line.substr(0, 200);
  } else if (!reply["score"].is_number()) {
    outcome.error = "returned a non-finite score (nan or inf): scores must be finite";
  } else {
    outcome.result.score = reply["score"].get<double>();
    const nlohmann::json parts = reply.value("parts", nlohmann::json::object());
    for (const auto& [name, value] : parts.items()) {
      if (value.is_number()) outcome.result.parts.emplace_back(name, value.get<double>());
    }
  }
  return outcome;
}

}  // namespace

PythonRewardPool::PythonRewardPool(const RewardConfig& config, size_t index, const std::string& tandem_binary,
                                   std::vector<std::string> search_path)
    : config_(config),
      index_(index),
      binary_(tandem_binary.empty() ? current_executable() : tandem_binary),
      search_path_(std::move(search_path)) {
  // A worker that dies while we write its request must not take the controller with it.
  ::signal(SIGPIPE, SIG_IGN);
  // Until the run's log exists (set_log_path), the workers' output (an import-time print)
  // is kept in a file of our own, never on the console.
  char pending[] = "/tmp/tandem-reward-output-XXXXXX";
  const int fd = ::mkstemp(pending);
  if (fd >= 0) {
    ::close(fd);
    pending_output_ = log_path_ = pending;
  }
  workers_.resize(static_cast<size_t>(reward_parallelism(config.workers)));
  try {
    for (size_t slot = 0; slot < workers_.size(); ++slot) start_worker(slot);
    wait_until_ready();
  } catch (...) {
    for (Worker& worker : workers_) stop_worker(worker);  // the destructor does not run
    throw;
  }
}

PythonRewardPool::~PythonRewardPool() {
  for (Worker& worker : workers_) stop_worker(worker);
  if (!pending_output_.empty()) ::unlink(pending_output_.c_str());
}

std::string PythonRewardPool::what() const {
  return fmt::format("reward.{} ({}:{})", index_, config_.python, config_.function);
}

void PythonRewardPool::set_log_path(const std::string& path) {
  if (!pending_output_.empty()) {  // what the workers printed before the log existed goes first
    const std::optional<std::string> printed = read_file(pending_output_);
    if (printed && !printed->empty()) {
      std::ofstream(path, std::ios::app) << *printed;
    }
    ::unlink(pending_output_.c_str());
    pending_output_.clear();
  }
  log_path_ = path;  // for workers started from now on
  // The running ones reopen their output there: no restart (the controller must not stop
  // heartbeating its other workers for an import's time). No reply comes for this line.
  const std::string line = nlohmann::json{{"log", path}}.dump() + "\n";
  for (size_t slot = 0; slot < workers_.size(); ++slot) {
    if (!write_all(workers_[slot].to_child, line)) kill_and_start(slot);
  }
  wait_until_ready();
}

void PythonRewardPool::start_worker(size_t slot) {
  std::vector<std::string> argv = {binary_, "reward-worker", "--file", config_.python, "--function", config_.function};
  if (config_.batched) argv.push_back("--batched");
  if (config_.reward_kwargs != "{}") argv.insert(argv.end(), {"--kwargs", config_.reward_kwargs});
  for (const std::string& directory : search_path_) argv.insert(argv.end(), {"--path", directory});
  Worker& worker = workers_[slot];
  SpawnOptions options;
  options.output_path = log_path_;  // empty only when no temporary file could be made: then ours
  options.own_process_group = true;  // what the reward forks is killed with it
  options.max_data_bytes = static_cast<uint64_t>(config_.memory_mb) << 20;
  PipedChild child = spawn_piped(argv, std::move(options));
  worker.process = std::move(child.process);
  worker.to_child = child.to_child;
  worker.from_child = child.from_child;
  worker.received.clear();
  worker.ready = false;
  worker.calls.clear();
  worker.answered = 0;
}

void PythonRewardPool::kill_and_start(size_t slot) {
  workers_[slot].process.kill_and_reap();
  stop_worker(workers_[slot]);
  start_worker(slot);  // clears the slot's calls
}

void PythonRewardPool::stop_worker(Worker& worker) {
  close_fd(worker.to_child);  // end of input: an idle worker exits by itself
  close_fd(worker.from_child);
  if (worker.process.running() && !worker.process.wait_for(1.0)) worker.process.kill_and_reap();
  worker.ready = false;
}

bool PythonRewardPool::read_lines(Worker& worker, std::vector<std::string>& lines) {
  char buffer[65536];
  const ssize_t n = ::read(worker.from_child, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) return false;
  worker.received.append(buffer, static_cast<size_t>(n));
  size_t newline;
  while ((newline = worker.received.find('\n')) != std::string::npos) {
    lines.push_back(worker.received.substr(0, newline));
    worker.received.erase(0, newline + 1);
  }
  return true;
}

void PythonRewardPool::wait_until_ready() {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kStartupSeconds));
  auto exited = [&](Worker& worker) {
    std::optional<ExitStatus> status = worker.process.wait_for(5.0);
    return status ? status->describe() : std::string("closed its output");
  };
  while (true) {
    std::vector<pollfd> fds;
    std::vector<size_t> slots;
    for (size_t slot = 0; slot < workers_.size(); ++slot) {
      if (workers_[slot].ready) continue;
      fds.push_back({workers_[slot].from_child, POLLIN, 0});
      slots.push_back(slot);
    }
    if (fds.empty()) return;
    throw_if_interrupted();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      throw Error(fmt::format("{}: the reward worker did not import the file within {} s", what(), kStartupSeconds));
    }
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, kPollMs))) < 0 && errno != EINTR) {
      throw Error(fmt::format("{}: poll failed: {}", what(), std::strerror(errno)));
    }
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      Worker& worker = workers_[slots[k]];
      std::vector<std::string> lines;
      const bool open = read_lines(worker, lines);
      if (!lines.empty()) {
        const nlohmann::json hello = nlohmann::json::parse(lines[0], nullptr, false);
        if (hello.is_object() && hello.value("ready", false)) {
          worker.ready = true;
          continue;
        }
        const std::string error = hello.is_object() && hello.contains("error") ? hello["error"].get<std::string>()
                                                                               : lines[0];
        throw Error(fmt::format("{}: {}", what(), error));
      }
      if (!open) {
        throw Error(fmt::format("{}: the reward worker {} before importing the file{}", what(), exited(worker),
                                log_path_.empty() ? "" : fmt::format(" (its output: {})", log_path_)));
      }
    }
  }
}

void PythonRewardPool::replace(size_t slot, const std::string& error, std::deque<size_t>& queue,
                               std::vector<RewardOutcome>& outcomes, std::vector<bool>& done) {
  Worker& worker = workers_[slot];
  std::vector<size_t> unanswered(worker.calls.begin() + static_cast<std::ptrdiff_t>(worker.answered),
                                 worker.calls.end());
  kill_and_start(slot);
  // A batched worker scores its whole chunk in one call: the error is every sample's.
  const size_t failed = config_.batched ? unanswered.size() : std::min<size_t>(1, unanswered.size());
  for (size_t k = 0; k < failed; ++k) {
    outcomes[unanswered[k]].error = error;
    done[unanswered[k]] = true;
  }
  for (size_t k = unanswered.size(); k > failed; --k) queue.push_front(unanswered[k - 1]);
  wait_until_ready();
}

void PythonRewardPool::restart_unfinished_workers() {
  bool restarted = false;
  for (size_t slot = 0; slot < workers_.size(); ++slot) {
    Worker& worker = workers_[slot];
    if (worker.ready && worker.answered >= worker.calls.size()) continue;
    // Still scoring calls of a score() that ended in an exception, or not started: its
    // late replies would land on this call's samples.
    kill_and_start(slot);
    restarted = true;
  }
  if (restarted) wait_until_ready();
}

std::vector<RewardOutcome> PythonRewardPool::score(const std::vector<RewardInput>& inputs) {
  restart_unfinished_workers();
  std::vector<RewardOutcome> outcomes(inputs.size());
  std::vector<bool> done(inputs.size(), false);
  requests_.clear();
  for (const RewardInput& in : inputs) {
    requests_.push_back(reward_arguments(in).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  std::deque<size_t> queue;
  for (size_t i = 0; i < inputs.size(); ++i) queue.push_back(i);
  const size_t workers = workers_.size();
  // Batched: one call per worker. Otherwise a few chunks per worker, so that the workers
  // finish together even when some samples take longer.
  const size_t chunk = config_.batched ? (inputs.size() + workers - 1) / workers
                                       : std::max<size_t>(1, inputs.size() / (workers * 4));
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.timeout_s));
  size_t remaining = inputs.size();
  int failed_writes = 0;

  // on_error: fail ends the step at its first error: the rest need not be scored.
  const bool stop_at_first_error = config_.on_error != "fallback";
  // Counting a group's processes reads /proc: at most every kPollMs, not at every reply.
  Clock::time_point next_process_count = Clock::now();
  while (remaining > 0) {
    throw_if_interrupted();
    for (size_t slot = 0; slot < workers && !queue.empty(); ++slot) {
      Worker& worker = workers_[slot];
      if (worker.answered < worker.calls.size()) continue;  // busy
      worker.calls.clear();
      worker.answered = 0;
      std::string request = "{\"calls\":[";
      while (!queue.empty() && worker.calls.size() < chunk) {
        const size_t call = queue.front();
        queue.pop_front();
        request += (worker.calls.empty() ? "" : ",") + requests_[call];
        worker.calls.push_back(call);
      }
      request += "]}\n";
      worker.deadline = Clock::now() + timeout;
      if (!write_all(worker.to_child, request)) {
        // The worker died while idle: its chunk goes back to the queue for the fresh one,
        // unless workers keep dying before they take anything.
        if (++failed_writes > 3) {
          replace(slot, fmt::format("reward workers keep exiting before they take a sample{}",
                                    log_path_.empty() ? "" : fmt::format(" (their output: {})", log_path_)),
                  queue, outcomes, done);
        } else {
          for (size_t k = worker.calls.size(); k > 0; --k) queue.push_front(worker.calls[k - 1]);
          kill_and_start(slot);
          wait_until_ready();
        }
      }
    }
    remaining = static_cast<size_t>(std::count(done.begin(), done.end(), false));
    if (remaining == 0) break;

    // Per busy worker: its reply pipe, then its pidfd (readable once it exits: a process it
    // forked may hold the pipe open past its death).
    std::vector<pollfd> fds;
    std::vector<size_t> slots;
    Clock::time_point soonest = Clock::time_point::max();
    for (size_t slot = 0; slot < workers; ++slot) {
      Worker& worker = workers_[slot];
      if (worker.answered >= worker.calls.size()) continue;
      fds.push_back({worker.from_child, POLLIN, 0});
      fds.push_back({worker.process.exit_fd(), POLLIN, 0});
      slots.push_back(slot);
      soonest = std::min(soonest, worker.deadline);
    }
    if (fds.empty()) continue;  // every chunk went back to the queue: send again
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(soonest - Clock::now()).count() + 1;
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(wait, 0, kPollMs))) < 0 &&
        errno != EINTR) {
      throw Error(fmt::format("{}: poll failed: {}", what(), std::strerror(errno)));
    }
    const bool count_processes = config_.max_processes > 0 && Clock::now() >= next_process_count;
    if (count_processes) next_process_count = Clock::now() + std::chrono::milliseconds(kPollMs);
    for (size_t k = 0; k < slots.size(); ++k) {
      const size_t slot = slots[k];
      Worker& worker = workers_[slot];
      const pollfd& pipe = fds[2 * k];
      const pollfd& exited = fds[2 * k + 1];
      if (pipe.revents || exited.revents) {
        std::vector<std::string> lines;
        // Replies first: a worker may write its last ones and then exit.
        const bool open = pipe.revents ? read_lines(worker, lines) : !exited.revents;
        bool failed = false;
        for (const std::string& line : lines) {
          if (worker.answered >= worker.calls.size()) break;
          const size_t call = worker.calls[worker.answered++];
          outcomes[call] = outcome_from_line(line);
          done[call] = true;
          failed = failed || !outcomes[call].error.empty();
          worker.deadline = Clock::now() + timeout;
        }
        if (failed && stop_at_first_error) return outcomes;  // the next score() restarts busy workers
        if (!open) {
          const std::optional<ExitStatus> status = worker.process.wait_for(5.0);
          replace(slot, fmt::format("the reward worker {} while scoring this sample{}",
                                    status ? status->describe() : std::string("closed its output"),
                                    log_path_.empty() ? "" : fmt::format(" (its output: {})", log_path_)),
                  queue, outcomes, done);
          if (stop_at_first_error) return outcomes;
          break;  // the replacement took time: poll the others afresh before judging their deadlines
        }
      }
      if (count_processes && worker.answered < worker.calls.size() &&
          processes_in_group(worker.process.pid()) > static_cast<size_t>(config_.max_processes)) {
        log::warn("{}: its worker (pid {}) holds more than {} processes: its process group is killed", what(),
                  worker.process.pid(), config_.max_processes);
        replace(slot, fmt::format("the reward started more than {} processes (reward.{}.max_processes); its worker "
                                  "and every process it started were killed",
                                  config_.max_processes, index_),
                queue, outcomes, done);
        if (stop_at_first_error) return outcomes;
        break;
      }
      if (worker.answered < worker.calls.size() && Clock::now() >= worker.deadline) {
        ++timeouts_;
        log::warn("{}: a call ran past {} s: its worker (pid {}) is killed and replaced", what(), config_.timeout_s,
                  worker.process.pid());
        replace(slot, fmt::format("timed out after {} s (reward.{}.timeout_s); its worker was killed and replaced",
                                  config_.timeout_s, index_),
                queue, outcomes, done);
        if (stop_at_first_error) return outcomes;
        break;  // as above
      }
    }
    remaining = static_cast<size_t>(std::count(done.begin(), done.end(), false));
  }
  return outcomes;
}

}  // namespace tandem
