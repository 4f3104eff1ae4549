// Hang diagnosis: a worker that stopped answering (missed heartbeats, or a command past
// launcher.command_timeout_s) is asked for its stacks before it is killed; one that
// cannot write them (stopped, or wedged past its dumper) gets gdb attached. What was
// learned goes into its log and the failure message.
#include "controller/workers/worker_pool.h"

#include "core/log.h"
#include "core/net_address.h"
#include "core/process.h"
#include "core/signals.h"
#include "core/stack_dump.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

namespace tandem {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// gdb's own limit, on top of hang_stacks_timeout_s: it reads the symbols of the worker's
// binary and libraries first (measured 0.3-3 s here), longer on a loaded host.
constexpr double kGdbTimeoutS = 15.0;

uintmax_t file_size_or_zero(const std::string& path) {
  std::error_code error;
  uintmax_t size = std::filesystem::file_size(path, error);
  return error ? 0 : size;
}

// Whether `text` was appended to the file at `path` after byte `offset`.
bool appended_since(const std::string& path, uintmax_t offset, const std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (!in || !in.seekg(static_cast<std::streamoff>(offset))) return false;
  std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return tail.find(text) != std::string::npos;
}

// The controller's lines in a worker's log, in the shape of the worker's own markers.
void append_to_log(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::app) << text;
}

// Whether process `pid` (on this host) is stopped (SIGSTOP) or held by a debugger: it
// cannot write its own stacks then, so there is no use waiting for them.
bool process_stopped(int pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t name_end = stat.rfind(')');  // the name in parentheses may hold anything
  if (name_end == std::string::npos || name_end + 2 >= stat.size()) return false;
  const char state = stat[name_end + 2];
  return state == 'T' || state == 't';
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// gdb attached to a worker that could not write its own stacks (stopped, or wedged
// past its dumper), its output going to a temporary file.
struct GdbRun {
  ChildProcess child;
  std::string output_path;
};

GdbRun start_gdb(const std::string& gdb, int pid) {
  char output_path[] = "/tmp/tandem-gdb-XXXXXX";
  int fd = ::mkstemp(output_path);
  if (fd < 0) throw Error(fmt::format("cannot make a file for gdb's output: {}", std::strerror(errno)));
  ::close(fd);
  SpawnOptions options;
  options.output_path = output_path;
  GdbRun run;
  run.output_path = output_path;
  run.child = ChildProcess::spawn({gdb, "-batch", "-nx", "-p", std::to_string(pid), "-ex", "thread apply all bt"}, options);
  return run;
}

}  // namespace

std::string WorkerPool::unanswered_command(const WorkerId& id) const {
  for (const auto& [request_id, p] : pending_) {  // by id: the oldest first
    if (!(p.worker == id) || replies_.count(request_id) || errors_.count(request_id)) continue;
    return fmt::format(", with command \"{}\" (request {}) unanswered for {:.1f} s", p.name, request_id,
                       seconds_since(p.sent));
  }
  return "";
}

void WorkerPool::fail_hung(const std::vector<Hang>& hangs) {
  const double timeout_s = options_.hang_stacks_timeout_s;
  if (timeout_s <= 0) {
    for (const Hang& h : hangs) fail(*find(h.id), h.reason);
    return;
  }
  // Ask every hung worker at once: by message, and by SIGUSR2 (with the same dump id)
  // where its pid is on this host, which reaches it when its I/O thread is the stuck one.
  struct Collection {
    Worker* worker;
    std::string reason;
    uint64_t dump_id;
    std::string log;
    uintmax_t log_offset;
    bool local;
    bool stopped = false;
    std::string stacks;  // where its stacks are, or why there are none; empty: not yet known
    std::optional<GdbRun> gdb;
  };
  const auto started = Clock::now();
  std::vector<Collection> collections;
  for (const Hang& h : hangs) {
    Worker* w = find(h.id);
    if (!w || w->status.state != WorkerState::ready) continue;
    Collection c{w, h.reason, ++stack_dump_sequence_, log_path(h.id), 0, false, false, "", std::nullopt};
    c.log_offset = file_size_or_zero(c.log);
    c.local = w->status.pid > 0 && w->status.hostname == this_hostname();
    log::error("worker {} (pid {}) {}; collecting the stacks of its threads into {} (up to {} s)", h.id.name(),
               w->status.pid, h.reason, c.log, timeout_s);
    append_to_log(c.log, fmt::format("==== tandem controller: {} {}; asking for the stacks of its threads (dump {}) ====\n",
                                     h.id.name(), h.reason, c.dump_id));
    channel_.send(w->peer, DumpStacksMsg{c.dump_id, h.reason});
    if (c.local) {
      sigval value{};
      value.sival_int = static_cast<int>(c.dump_id);
      ::sigqueue(w->status.pid, stack_dump_trigger_signal(), value);
    }
    collections.push_back(std::move(c));
  }
  // Wait for the dumps' end lines in the logs (or their StacksDumped messages, for logs
  // this host cannot read), keeping the other workers' heartbeats going.
  const auto deadline = started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  // A worker that exits meanwhile (one that gave up on a stalled controller, say) is
  // reaped and reported by how it ended, not as hung.
  auto ended = [](const Collection& c) { return c.worker->status.state == WorkerState::failed; };
  while (true) {
    reap_ended_workers();
    bool all_written = true;
    for (Collection& c : collections) {
      if (!c.stacks.empty() || ended(c)) continue;
      if (c.worker->stacks_dumped >= c.dump_id ||
          appended_since(c.log, c.log_offset, stack_dump_end_line_start(c.worker->status.id.name(), c.dump_id))) {
        c.stacks = fmt::format("the stacks of its threads are in its log (written by the worker in {:.1f} s)",
                               seconds_since(started));
      } else if (!c.stopped) {
        c.stopped = c.local && process_stopped(c.worker->status.pid);
        all_written = all_written && c.stopped;
      }
    }
    if (all_written || Clock::now() >= deadline || pending_interrupt()) break;
    receive_messages(20);
    send_heartbeats_if_due();
  }
  // Those that wrote nothing: gdb where it can attach (same host, installed).
  const std::string gdb = find_on_path("gdb");
  auto why_not_its_own = [&](const Collection& c) {
    return c.stopped ? std::string("it is stopped (SIGSTOP, or held by a debugger)")
                     : fmt::format("it wrote none within {} s", timeout_s);
  };
  for (Collection& c : collections) {
    if (!c.stacks.empty() || ended(c)) continue;
    const std::string none = "no stacks of its threads: " + why_not_its_own(c);
    if (!c.local) {
      c.stacks = fmt::format("{}, and gdb cannot reach its host {}", none, c.worker->status.hostname);
    } else if (gdb.empty()) {
      c.stacks = none + ", and gdb (the fallback) is not installed";
    } else if (pending_interrupt()) {
      c.stacks = none + " (interrupted)";
    } else {
      try {
        c.gdb = start_gdb(gdb, c.worker->status.pid);
        log::warn("{}: no stacks of its own ({}): running gdb on pid {}", c.worker->status.id.name(),
                  why_not_its_own(c), c.worker->status.pid);
      } catch (const std::exception& e) {
        c.stacks = fmt::format("{}, and gdb could not start: {}", none, e.what());
      }
    }
  }
  const auto gdb_deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kGdbTimeoutS));
  while (Clock::now() < gdb_deadline && !pending_interrupt()) {
    bool running = false;
    for (Collection& c : collections) running = running || (c.gdb && !c.gdb->child.poll());
    if (!running) break;
    receive_messages(20);
    send_heartbeats_if_due();
  }
  for (Collection& c : collections) {
    if (!c.gdb) continue;
    const std::string name = c.worker->status.id.name();
    std::optional<ExitStatus> status = c.gdb->child.poll();
    if (!status) c.gdb->child.kill_and_reap();
    const std::string output = read_whole(c.gdb->output_path);
    ::unlink(c.gdb->output_path.c_str());
    const bool has_stacks = status && output.find("\nThread ") != std::string::npos;
    append_to_log(c.log, fmt::format("==== tandem controller: gdb stacks of {} (pid {}) begin ====\n{}"
                                     "==== tandem controller: gdb stacks of {} end ====\n",
                                     name, c.worker->status.pid, output, name));
    c.stacks = has_stacks ? fmt::format("the stacks of its threads are in its log (by gdb: {})", why_not_its_own(c))
               : status   ? fmt::format("no stacks of its threads: {}, and gdb failed ({}; its output is in the log)",
                                        why_not_its_own(c), status->describe())
                          : fmt::format("no stacks of its threads: {}, and gdb did not finish within {} s",
                                        why_not_its_own(c), kGdbTimeoutS);
  }
  reap_ended_workers();
  for (Collection& c : collections) {
    if (ended(c)) {
      append_to_log(c.log, fmt::format("==== tandem controller: {} {} meanwhile ====\n", c.worker->status.id.name(),
                                       c.worker->status.failure));
      continue;
    }
    append_to_log(c.log, fmt::format("==== tandem controller: {}: {}; killing it ====\n", c.worker->status.id.name(),
                                     c.stacks));
    fail(*c.worker, c.reason + "; " + c.stacks);
  }
}

}  // namespace tandem
