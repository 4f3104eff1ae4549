// Every thread's stack of this worker process, written into its log on request: the
// controller asks before it kills a worker it thinks hung (worker_pool.cpp), and a person
// may ask with `kill -USR2 PID`. See docs/troubleshooting.md.
//
// How: stack_dump_install() starts a dumper thread that sleeps until asked, either by
// stack_dump_request() (the I/O thread, on a DumpStacks message) or by SIGUSR2, whose
// handler only writes to an eventfd, so that a dump still happens when the I/O thread is
// the stuck one. The dumper then sends a capture signal to each thread in turn (tgkill);
// the capture handler records its own return addresses into a preallocated slot and
// posts a semaphore, nothing else. Symbols (libbacktrace: function, file:line; else
// dladdr), thread names and the running commands are looked up on the dumper thread,
// outside any handler, and the whole dump goes to stderr (the worker's log) in one
// write, between a begin and an end line. A thread that blocks the capture signal or
// does not answer within a short time is listed without a stack.
//
// Trade-off: glibc's backtrace() is used for the capture rather than libunwind, whose
// library also defines the _Unwind_* functions and would take over C++ exception
// unwinding for the whole process once linked. backtrace() is called once at install so
// that its lazy load of libgcc_s never happens inside a handler.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tandem {

// The signal that asks for a dump; its sigqueue() value, when set, is the dump id.
int stack_dump_trigger_signal();

// Starts the dumper thread and installs both signal handlers. Once per process (later
// calls only update the worker name); call it early, before the threads worth seeing
// exist or at least before anyone asks for a dump.
void stack_dump_install(const std::string& worker_name);

// Asks for dump `dump_id` (0: a dump with no id, always written) and returns at once.
// A dump id at or below one already written is ignored: the controller sends the same
// id as a message and as a signal.
void stack_dump_request(uint64_t dump_id, const std::string& reason);

// Readable (an eventfd) each time a dump has been written; -1 before install.
int stack_dump_done_fd();
// Drains stack_dump_done_fd(). Returns the highest dump id written so far and its summary.
uint64_t stack_dump_take_done(std::string& summary);

// The first line of a dump and the start of its last line in the log. The controller
// looks for the end line of the dump it asked for.
std::string stack_dump_begin_line(const std::string& worker_name, uint64_t dump_id);
std::string stack_dump_end_line_start(const std::string& worker_name, uint64_t dump_id);

// Every thread's stack now, formatted (no begin and end lines): for tests, and the body
// of a dump. Needs stack_dump_install() first.
std::string stack_dump_capture_all();

// While alive, dumps list this thread under `label` ("executor", "control I/O").
class StackDumpThreadLabel {
 public:
  explicit StackDumpThreadLabel(const std::string& label);
  ~StackDumpThreadLabel();
  StackDumpThreadLabel(const StackDumpThreadLabel&) = delete;
  StackDumpThreadLabel& operator=(const StackDumpThreadLabel&) = delete;

 private:
  int tid_;
};

// While alive, dumps name this command as running (with its request id and how long).
class StackDumpRunningCommand {
 public:
  StackDumpRunningCommand(const std::string& name, uint64_t request_id);
  ~StackDumpRunningCommand();
  StackDumpRunningCommand(const StackDumpRunningCommand&) = delete;
  StackDumpRunningCommand& operator=(const StackDumpRunningCommand&) = delete;

 private:
  uint64_t token_;
};

}  // namespace tandem
