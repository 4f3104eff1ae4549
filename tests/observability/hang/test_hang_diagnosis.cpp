// Hang diagnosis: the stacks of every thread of a worker that the controller is about to
// kill as hung land in the worker's log, however it hangs. First in one process (the
// capture itself), then with real worker processes on loopback, hung by the test-only
// commands (TANDEM_TEST_COMMANDS=1): a command past its timeout, a wedged I/O thread
// (heartbeats stop: only the signal path can ask), a stopped process (only gdb can),
// and collection turned off.
#include "controller/run/run_status.h"
#include "controller/workers/worker_pool.h"
#include "core/config.h"
#include "core/files.h"
#include "core/process.h"
#include "core/protocol.h"
#include "core/stack_dump.h"

#include <doctest/doctest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

// Test-only commands for the workers this test starts (they inherit the environment).
class TestCommandsOn {
 public:
  TestCommandsOn() { ::setenv("TANDEM_TEST_COMMANDS", "1", 1); }
  ~TestCommandsOn() { ::unsetenv("TANDEM_TEST_COMMANDS"); }
};

PoolOptions hang_options(const std::string& dir) {
  PoolOptions o;
  o.bind_address = "tcp://127.0.0.1:*";
  o.log_dir = dir;
  o.register_timeout_s = 30;
  o.heartbeat_interval_s = 0.1;
  o.heartbeat_timeout_s = 10;  // the cases that want missed heartbeats lower it
  o.command_timeout_s = 60;
  o.shutdown_grace_s = 2;
  // Generous, so that a loaded machine still gets the worker's own dump; collection ends
  // as soon as the dump is in the log, so the cases do not wait this long.
  o.hang_stacks_timeout_s = 30;
  return o;
}

const WorkerId rollout0{"rollout", 0};

WorkerFailure failure_of_request(WorkerPool& pool, uint64_t id) {
  try {
    pool.wait({id});
  } catch (const WorkerFailure& f) {
    return f;
  }
  FAIL("request ", id, " was answered: no failure");
  throw std::logic_error("unreachable");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The text of the worker's dump `dump_id` in its log (begin line to end line); empty when missing.
std::string dump_in_log(const std::string& log, uint64_t dump_id) {
  const size_t begin = log.find(fmt::format("==== tandem stack dump begin: rollout-0 dump {} (", dump_id));
  const size_t end = log.find(stack_dump_end_line_start("rollout-0", dump_id));
  if (begin == std::string::npos || end == std::string::npos || end < begin) return "";
  return log.substr(begin, log.find('\n', end) - begin);
}

// The part of a dump about the thread labeled `label`.
std::string thread_section(const std::string& dump, const std::string& label) {
  const size_t at = dump.find("[" + label + "]");
  if (at == std::string::npos) return "";
  const size_t next = dump.find("\nthread ", at);
  return dump.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

// Bounded: the pool kills the worker before it reports the failure.
void expect_gone(WorkerPool& pool, int pid) {
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (process_alive(pid) && Clock::now() < deadline) pool.poll_events(0.05);
  CHECK_MESSAGE(!process_alive(pid), "the hung worker (pid ", pid, ") still runs");
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

[[gnu::noipa]] void parked_for_stack_dump_test(const std::atomic<bool>& release) {
  while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

}  // namespace

TEST_CASE("in one process: every thread's stack, with functions, files, lines and labels") {
  stack_dump_install("test-0");
  std::atomic<bool> release{false};
  std::atomic<int> ready{0};
  std::thread parked([&] {
    StackDumpThreadLabel label("parked");
    ++ready;
    parked_for_stack_dump_test(release);
  });
  std::thread deaf([&] {
    sigset_t all;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
    ++ready;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  while (ready < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::string text = stack_dump_capture_all();
  release = true;
  parked.join();
  deaf.join();
  const std::string section = thread_section(text, "parked");
  CHECK_MESSAGE(contains(section, "parked_for_stack_dump_test"), text);
#if TANDEM_HAVE_LIBBACKTRACE
  CHECK_MESSAGE(contains(section, "test_hang_diagnosis.cpp:"), text);
#endif
  CHECK_MESSAGE(contains(text, "no stack: it blocks the capture signal"), text);
  CHECK_MESSAGE(contains(text, "(this thread writes the dump)"), text);
  // Capturing again works (the slot is reused), and this process goes on.
  CHECK(contains(stack_dump_capture_all(), "(this thread writes the dump)"));
}

TEST_CASE("the stack dump messages round-trip") {
  Message back;
  std::string error;
  std::string bytes = encode_message(DumpStacksMsg{7, "did not answer"});
  REQUIRE(decode_message(bytes.data(), bytes.size(), DecodeLimits{}, back, error));
  REQUIRE(std::holds_alternative<DumpStacksMsg>(back));
  CHECK(std::get<DumpStacksMsg>(back).dump_id == 7);
  CHECK(std::get<DumpStacksMsg>(back).reason == "did not answer");
  bytes = encode_message(StacksDumpedMsg{9, rollout0, "3 threads, 2 stacks"});
  REQUIRE(decode_message(bytes.data(), bytes.size(), DecodeLimits{}, back, error));
  REQUIRE(std::holds_alternative<StacksDumpedMsg>(back));
  CHECK(std::get<StacksDumpedMsg>(back).dump_id == 9);
  CHECK(std::get<StacksDumpedMsg>(back).worker == rollout0);
  CHECK(std::get<StacksDumpedMsg>(back).summary == "3 threads, 2 stacks");
  CHECK(std::string(message_kind(back)) == "stacks_dumped");
}

TEST_CASE("launcher.hang_stacks_timeout_s reaches the pool") {
  LauncherConfig launcher;
  launcher.hang_stacks_timeout_s = 7.5;
  CHECK(pool_options_from_config(launcher, "/tmp/logs", "/tmp/sockets").hang_stacks_timeout_s == 7.5);
  launcher.hang_stacks_timeout_s = 0;
  CHECK(pool_options_from_config(launcher, "/tmp/logs", "/tmp/sockets").hang_stacks_timeout_s == 0);
}

TEST_CASE("a command past its timeout: the worker writes its stacks, naming the command, then is killed") {
  TestCommandsOn test_commands;
  TempDir temp;
  const std::string& dir = temp.path();
  PoolOptions options = hang_options(dir);
  options.command_timeout_s = 2;
  WorkerPool pool(options, make_local_launcher(TANDEM_BINARY));
  pool.start({rollout0});
  const int pid = pool.worker_status(rollout0).pid;

  // The pool's reply times and heartbeat clock (for status and metrics users).
  const CommandReply ping = pool.call_all("ping", "x")[0];
  CHECK(ping.seconds > 0);
  CHECK(std::isfinite(ping.seconds));
  const double now_unix = unix_now();
  const double heard = pool.worker_status(rollout0).last_heartbeat_unix;
  CHECK(heard > now_unix - 60);
  CHECK(heard <= now_unix + 1);

  const uint64_t id = pool.send(rollout0, "test_hang");
  const WorkerFailure f = failure_of_request(pool, id);
  INFO("reason: ", f.reason());
  CHECK(f.worker() == rollout0);
  CHECK(contains(f.reason(), fmt::format("did not answer command \"test_hang\" (request {}) within 2 s", id)));
  CHECK(contains(f.reason(), "the stacks of its threads are in its log (written by the worker"));
  CHECK(contains(f.what(), dir + "/rollout-0.log"));
  expect_gone(pool, pid);

  const std::string log = read_file(dir + "/rollout-0.log").value_or("");
  const std::string dump = dump_in_log(log, 1);
  REQUIRE_MESSAGE(!dump.empty(), log);
  CHECK_MESSAGE(contains(dump, fmt::format("running command: test_hang (request {}) for", id)), dump);
  const std::string executor = thread_section(dump, "executor: runs commands");
  CHECK_MESSAGE(contains(executor, "hang_in_test_command_for_stack_dump"), dump);
  CHECK_MESSAGE(contains(executor, "run_worker"), dump);
  CHECK_MESSAGE(contains(thread_section(dump, "control I/O: heartbeats, messages"), "io_loop"), dump);
  // Asked twice (message and signal) under one dump id: written once.
  CHECK_MESSAGE(count(log, "==== tandem stack dump begin:") == 1, log);
  CHECK(contains(log, "==== tandem controller: rollout-0 did not answer command \"test_hang\""));
  pool.shutdown("test done");
}

TEST_CASE("missed heartbeats with the I/O thread wedged: the signal still gets the stacks") {
  TestCommandsOn test_commands;
  TempDir temp;
  const std::string& dir = temp.path();
  PoolOptions options = hang_options(dir);
  options.heartbeat_timeout_s = 1.5;
  WorkerPool pool(options, make_local_launcher(TANDEM_BINARY));
  pool.start({rollout0});
  const int pid = pool.worker_status(rollout0).pid;
  const uint64_t id = pool.send(rollout0, "test_wedge_io");  // its reply never leaves: the I/O thread is stuck
  const WorkerFailure f = failure_of_request(pool, id);
  INFO("reason: ", f.reason());
  CHECK(f.reason().find("is hung: no heartbeat for") == 0);
  CHECK(contains(f.reason(), fmt::format("with command \"test_wedge_io\" (request {}) unanswered", id)));
  CHECK(contains(f.reason(), "the stacks of its threads are in its log (written by the worker"));
  expect_gone(pool, pid);

  const std::string log = read_file(dir + "/rollout-0.log").value_or("");
  const std::string dump = dump_in_log(log, 1);
  REQUIRE_MESSAGE(!dump.empty(), log);
  CHECK_MESSAGE(contains(thread_section(dump, "control I/O: heartbeats, messages"), "wedge_io_thread_for_stack_dump"),
                dump);
  CHECK_MESSAGE(contains(dump, "running command: none"), dump);
  CHECK_MESSAGE(contains(thread_section(dump, "executor: runs commands"), "run_worker"), dump);
  pool.shutdown("test done");
}

TEST_CASE("a stopped worker: gdb writes its stacks, and it is killed") {
  const std::string gdb = find_on_path("gdb");
  if (gdb.empty()) {
    MESSAGE("skipped: gdb is not installed (scripts/install_deps.sh installs it)");
    return;
  }
  TempDir temp;
  const std::string& dir = temp.path();
  PoolOptions options = hang_options(dir);
  options.heartbeat_timeout_s = 1;
  // Long: the pool sees that a stopped process cannot answer and goes to gdb at once.
  WorkerPool pool(options, make_local_launcher(TANDEM_BINARY));
  pool.start({rollout0});
  const int pid = pool.worker_status(rollout0).pid;
  REQUIRE(::kill(pid, SIGSTOP) == 0);
  const uint64_t id = pool.send(rollout0, "ping", "x");  // queued: nobody reads it
  const WorkerFailure f = failure_of_request(pool, id);
  INFO("reason: ", f.reason());
  CHECK(f.reason().find("is hung: no heartbeat for") == 0);
  CHECK(contains(f.reason(), "the stacks of its threads are in its log (by gdb: it is stopped (SIGSTOP"));
  expect_gone(pool, pid);

  const std::string log = read_file(dir + "/rollout-0.log").value_or("");
  const std::string begin = fmt::format("==== tandem controller: gdb stacks of rollout-0 (pid {}) begin ====", pid);
  const size_t from = log.find(begin);
  const size_t to = log.find("==== tandem controller: gdb stacks of rollout-0 end ====");
  REQUIRE_MESSAGE(from != std::string::npos, log);
  REQUIRE_MESSAGE(to != std::string::npos, log);
  const std::string stacks = log.substr(from, to - from);
  CHECK_MESSAGE(contains(stacks, "\nThread "), stacks);
  CHECK_MESSAGE(contains(stacks, "run_worker"), stacks);
  pool.shutdown("test done");
}

TEST_CASE("hang_stacks_timeout_s 0: a hung worker is killed at once, without stacks") {
  TestCommandsOn test_commands;
  TempDir temp;
  const std::string& dir = temp.path();
  PoolOptions options = hang_options(dir);
  options.command_timeout_s = 1;
  options.hang_stacks_timeout_s = 0;
  WorkerPool pool(options, make_local_launcher(TANDEM_BINARY));
  pool.start({rollout0});
  const int pid = pool.worker_status(rollout0).pid;
  const uint64_t id = pool.send(rollout0, "test_hang");
  const WorkerFailure f = failure_of_request(pool, id);
  CHECK(contains(f.reason(), "did not answer command \"test_hang\""));
  CHECK_FALSE(contains(f.reason(), "stacks"));
  expect_gone(pool, pid);
  const std::string log = read_file(dir + "/rollout-0.log").value_or("");
  CHECK_FALSE(contains(log, "tandem stack dump"));
  CHECK_FALSE(contains(log, "tandem controller:"));
  pool.shutdown("test done");
}

TEST_CASE("without TANDEM_TEST_COMMANDS the test commands are unknown; SIGUSR2 dumps a healthy worker, which goes on") {
  ::unsetenv("TANDEM_TEST_COMMANDS");
  TempDir temp;
  const std::string& dir = temp.path();
  WorkerPool pool(hang_options(dir), make_local_launcher(TANDEM_BINARY));
  pool.start({rollout0});
  const uint64_t id = pool.send(rollout0, "test_hang");
  const WorkerFailure f = failure_of_request(pool, id);
  CHECK(f.command_error());
  CHECK(contains(f.reason(), "unknown command"));
  pool.forget(id);

  // By hand, as docs/troubleshooting.md says: the capture signals interrupt every
  // thread's system calls, and the worker must shrug that off.
  REQUIRE(::kill(pool.worker_status(rollout0).pid, SIGUSR2) == 0);
  const std::string end = stack_dump_end_line_start("rollout-0", 0);
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!contains(read_file(dir + "/rollout-0.log").value_or(""), end) && Clock::now() < deadline) {
    pool.poll_events(0.05);
  }
  const std::string log = read_file(dir + "/rollout-0.log").value_or("");
  CHECK_MESSAGE(contains(dump_in_log(log, 0), "asked: by SIGUSR2 from pid"), log);
  for (int round = 0; round < 20; ++round) CHECK(pool.call_all("ping", "still here")[0].reply.body == "still here");
  CHECK_FALSE(pool.first_failure().has_value());
  pool.shutdown("test done");
}
