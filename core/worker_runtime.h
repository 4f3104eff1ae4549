// The worker side of the control plane, shared by every role.
//
// Threading model: an I/O thread owns the DEALER socket. It sends heartbeats every
// interval whatever the worker is doing, watches the controller's heartbeats, and
// hands commands to the executor (the calling thread) over an inproc pair. The
// executor runs one command at a time and sends back a Reply, or an ErrorReply
// carrying the exception's message. So a long command never looks like a dead worker,
// while a stopped or wedged process does (its heartbeats stop).
//
// Hang diagnosis: a third thread (stack_dump.h) writes every thread's stack into the
// worker's log when the controller asks (a DumpStacks message, or SIGUSR2 when the I/O
// thread itself is stuck); the I/O thread tells the controller once it is written.
#pragma once

#include "core/curve_auth.h"
#include "core/error.h"
#include "core/protocol.h"

#include <functional>
#include <optional>
#include <string>

namespace tandem {

struct WorkerOptions {
  WorkerId id;
  std::string controller_address;
  double heartbeat_interval_s = 0.5;
  double controller_timeout_s = 10.0;  // no heartbeat from the controller for this long: exit
  size_t max_message_bytes = 64u << 20;
  std::optional<CurveKeys> curve;  // CURVE keys when the controller requires them (curve_auth.h)
};

// A worker's exit status when it gave up on its controller (no heartbeats from it for
// controller_timeout_s): not the worker's failure. The controller, when it was only
// paused or starved, restarts such workers without counting a restart.
constexpr int kExitLostController = 75;  // EX_TEMPFAIL

// Whether this worker process is ending because it lost its controller.
bool worker_lost_controller();

struct CommandResult {
  std::string body;
  std::vector<std::string> attachments;
};

// Runs one command of a role; throw to report failure to the controller.
using CommandHandler = std::function<CommandResult(const CommandMsg& command,
                                                   const std::vector<std::string>& attachments)>;

// The Error for a command that `role`'s table (command name -> method) lacks: it names
// every command the worker knows, its own ("ping", "describe") first.
template <typename Table>
Error unknown_command(const std::string& role, const std::string& name, const Table& table) {
  std::string known = "ping, describe";
  for (const auto& entry : table) known += ", " + entry.first;
  return Error(fmt::format("{} worker: unknown command \"{}\" (known: {})", role, name, known));
}

// Sends part of the running command's result to the controller before its reply: a
// ProgressMsg with the command's request id (rollout_generate sends the samples that
// finished). Call it only from inside a CommandHandler, on the executor thread; anywhere
// else (a handler called directly, as unit tests do) it does nothing.
void send_command_progress(const std::string& body, const std::vector<std::string>& attachments);

// Runs, from inside a CommandHandler on the executor thread, the commands that have
// arrived since the running one started and that `may_interleave` accepts by name, each
// replied to as usual; the others (and everything after the first of them) wait until
// the running command is done. A long command calls it between units of its work (the
// rollout engine between steps, so a weight update lands mid-generation). Anywhere else
// it does nothing.
void serve_interleaved_commands(const std::function<bool(const std::string&)>& may_interleave);

// Whether this process answers test-only commands (its environment has
// TANDEM_TEST_COMMANDS=1): hooks that make a worker hang or lag on purpose, for tests.
bool test_commands_enabled();

// Commands every worker answers itself: "ping" (echoes body and attachments) and
// "describe" (role, rank, pid, host); with TANDEM_TEST_COMMANDS=1 in its environment
// also "test_hang" and "test_wedge_io", which hang the executor or the I/O thread for
// good (for the hang diagnosis tests). Others go to `handler`.
// Returns 0 after a Shutdown from the controller, 1 when the controller was lost.
int run_worker(const WorkerOptions& options, const CommandHandler& handler);

}  // namespace tandem
