// The controller's view of its workers: launches them, waits for them to register,
// sends commands and collects replies, and watches their health.
//
// Single-threaded: every call pumps one event loop (socket, child exits, heartbeat
// clocks, interrupt flag). A worker that exits, stops sending heartbeats, answers
// with an error or takes longer than the command timeout becomes a WorkerFailure
// naming it (role, rank, pid), why, and where its log is.
//
// Hang diagnosis: a worker about to be killed as hung (missed heartbeats, or a command
// past its timeout) is first asked for the stacks of all its threads, which it writes
// into its log (core/stack_dump.h); a local worker that cannot answer gets gdb instead.
// That takes at most hang_stacks_timeout_s, plus gdb's own limit, for all hung workers
// together; the event loop (heartbeats to the other workers, their messages) goes on
// meanwhile.
#pragma once

#include "controller/launch/launcher.h"
#include "core/channel.h"
#include "core/curve_auth.h"
#include "core/error.h"
#include "core/signals.h"  // Interrupted

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

struct LauncherConfig;

struct PoolOptions {
  std::string bind_address = "tcp://127.0.0.1:*";
  // The address workers dial, when it differs from the bound one (tcp://0.0.0.0:P binds
  // every interface; workers dial a name or address of this host). Empty: the bound one.
  std::string advertised_address;
  std::string log_dir = ".";
  double register_timeout_s = 60.0;
  double heartbeat_interval_s = 0.5;
  double heartbeat_timeout_s = 10.0;
  double command_timeout_s = 600.0;
  double shutdown_grace_s = 5.0;
  // Seconds to wait for a hung worker's own stack dump before the gdb fallback and the
  // kill; 0: kill hung workers at once, without their stacks. Off here, so that pools
  // built by hand (tests, benchmarks) kill as before; runs get the config's
  // launcher.hang_stacks_timeout_s (default 5) through pool_options_from_config.
  double hang_stacks_timeout_s = 0;
  size_t max_message_bytes = 64u << 20;
  // CURVE on the control channel: only these keys' workers get in, and each registers
  // only as the worker its key belongs to. Empty: no authentication (loopback, ipc).
  std::optional<RunKeys> keys;
  // The roles whose workers have their cores to themselves while they compute
  // (LaunchRequest::computes_alone).
  std::set<std::string> roles_computing_alone;
};

// Options from the `launcher:` config section; ipc sockets live under `socket_dir`.
PoolOptions pool_options_from_config(const LauncherConfig& config, const std::string& log_dir,
                                     const std::string& socket_dir);

class WorkerFailure : public Error {
 public:
  // `command_error`: the worker is alive and answered a command with an error (a bad
  // request or a bug: running it again would fail again); otherwise it died, hung or
  // never registered.
  WorkerFailure(WorkerId worker, int pid, std::string reason, const std::string& log_path, bool command_error = false);
  const WorkerId& worker() const { return worker_; }
  int pid() const { return pid_; }
  const std::string& reason() const { return reason_; }
  bool command_error() const { return command_error_; }
  const std::string& log_path() const { return log_path_; }
  // It exited because it heard nothing from the controller (kExitLostController): the
  // controller was paused or starved, not the worker at fault.
  bool lost_controller() const { return lost_controller_; }
  void set_lost_controller() { lost_controller_ = true; }

 private:
  bool lost_controller_ = false;
  WorkerId worker_;
  int pid_;
  std::string reason_;
  std::string log_path_;
  bool command_error_;
};


// The run stopped after step `step`, checkpointed, because `signal` asked it to
// (install_interrupt_handlers with stop_on_sigterm), or `tandem stop` did (signal 0).
class StopRequested : public Error {
 public:
  StopRequested(int signal, int64_t step);
  int signal() const { return signal_; }
  int64_t step() const { return step_; }

 private:
  int signal_;
  int64_t step_;
};

enum class WorkerState { starting, ready, failed, stopped };

struct WorkerStatus {
  WorkerId id;
  int pid = 0;
  WorkerState state = WorkerState::starting;
  std::string failure;  // set when failed
  std::string hostname;  // as the worker registered
  std::string address;   // where its peers reach it (RegisterMsg::address)
  int64_t restarts = 0;  // times restart() started it again
  double last_heartbeat_unix = 0;  // wall clock (Unix seconds) of its last message or heartbeat; 0: none yet
};

struct CommandReply {
  ReplyMsg reply;
  std::vector<std::string> attachments;
  double seconds = 0;  // from the command's send to this reply's (or progress's) arrival, steady clock
};

class WorkerPool {
 public:
  WorkerPool(PoolOptions options, std::unique_ptr<Launcher> launcher);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Launches the workers and waits until all have registered. Throws WorkerFailure.
  void start(const std::vector<WorkerId>& workers);

  // Ends worker `id` if it still runs, forgets its unanswered requests, launches it again
  // and waits until it registers (launcher.register_timeout_s). The new process starts
  // bare: whatever earlier commands set up in the old one is gone. Throws WorkerFailure
  // when the new process fails too.
  void restart(const WorkerId& id);
  // The same for several workers at once: all are launched, then all waited for.
  void restart(const std::vector<WorkerId>& ids);

  // Sends a command; returns its request id.
  uint64_t send(const WorkerId& worker, const std::string& name, const std::string& body = "",
                const std::vector<std::string>& attachments = {});
  // Whether request `id` can still be waited for: false once wait() returned its reply or
  // its worker was restarted (which forgets the worker's requests).
  bool has_request(uint64_t id) const { return pending_.count(id) != 0; }
  // Whether request `id`'s reply is in (not an error), waiting to be taken by wait().
  bool answered(uint64_t id) const { return replies_.count(id) != 0; }
  // Drops request `id` (and any reply or error already in) without waiting for it: for a
  // request whose outcome no longer matters, e.g. one that wait() reported failed.
  void forget(uint64_t id);
  // Waits for the replies to these requests. Throws WorkerFailure on any worker failure.
  // `on_progress` sees each ProgressMsg of these requests as it arrives (in the reply's
  // shape), before their replies.
  using ProgressHandler = std::function<void(CommandReply&&)>;
  std::map<uint64_t, CommandReply> wait(const std::vector<uint64_t>& request_ids,
                                        const ProgressHandler& on_progress = {});
  // One command to every worker; replies in the order of status().
  std::vector<CommandReply> call_all(const std::string& name, const std::string& body = "");

  // Runs the event loop for `seconds` without throwing on failures (they are recorded).
  void poll_events(double seconds);
  // Asks every worker to exit, waits shutdown_grace_s, kills the rest. Idempotent.
  void shutdown(const std::string& reason);

  std::vector<WorkerStatus> status() const;
  // Seconds each worker spent on each command (send to reply, summed by command name)
  // since the last call; the pool then starts counting again.
  std::map<std::string, std::map<std::string, double>> take_command_times() { return std::exchange(command_times_, {}); }
  // Called about once a second while the pool pumps events (e.g. to refresh worker
  // health gauges during a long command). It must not call back into the pool's waits.
  void set_health_observer(std::function<void()> observer) { health_observer_ = std::move(observer); }
  std::optional<WorkerFailure> first_failure() const;
  std::string log_path(const WorkerId& id) const;
  // Frames and messages dropped as malformed, unexpected or from unknown senders.
  uint64_t rejected_messages() const { return channel_.rejected_count() + rejected_; }
  // Connections refused by CURVE authentication (an unknown or unkeyed peer).
  uint64_t refused_connections() { return channel_.poll_handshake_failures(); }
  // The registered worker's host name and address (empty before it registers).
  const WorkerStatus& worker_status(const WorkerId& id) const;
  const std::string& address() const { return address_; }

 private:
  struct Worker {
    WorkerStatus status;
    std::string peer;  // ZeroMQ routing id once registered
    std::chrono::steady_clock::time_point last_seen;
    uint64_t stacks_dumped = 0;  // the last stack dump id it reported written (StacksDumpedMsg)
    bool lost_controller = false;  // it exited with kExitLostController
  };
  // A worker about to be failed as hung, and why.
  struct Hang {
    WorkerId id;
    std::string reason;
  };
  struct Pending {
    WorkerId worker;
    std::string name;
    std::chrono::steady_clock::time_point sent;
  };

  // restart() without the wait: the old process ended, its requests forgotten, a new one launched.
  void relaunch(const WorkerId& id);
  void pump(int timeout_ms);
  // The parts of pump() that go on while hung workers' stacks are collected.
  void receive_messages(int timeout_ms);
  void send_heartbeats_if_due();
  // After a stall of the controller itself (stopped, starved) longer than the heartbeat
  // timeout, restarts every worker's silence clock at now: the silence was not theirs.
  void excuse_own_stall();
  // Collects the hung workers' stacks into their logs (all at once, bounded), then fails them.
  void fail_hung(const std::vector<Hang>& hangs);
  // `, with command "X" (request N) unanswered for T s` for the worker's oldest open request; empty: none.
  std::string unanswered_command(const WorkerId& id) const;
  // Marks the workers whose processes have ended as failed, saying how they ended.
  void reap_ended_workers();
  LaunchRequest launch_request(const WorkerId& id) const;
  // Pumps until every worker in `ids` has registered; a failure or the timeout throws.
  void wait_registered(const std::vector<WorkerId>& ids);
  void handle(Envelope& envelope);
  void fail(Worker& worker, const std::string& reason);
  void reject(const std::string& peer, const std::string& why);
  Worker* find(const WorkerId& id);
  Worker* find_peer(const std::string& peer);
  WorkerFailure failure_of(const Worker& worker) const;

  PoolOptions options_;
  std::unique_ptr<Launcher> launcher_;
  zmq::context_t context_;
  std::unique_ptr<CurveAuthenticator> authenticator_;  // before channel_: it must answer from the first connection
  Channel channel_;
  std::string address_;
  std::vector<Worker> workers_;
  std::map<uint64_t, Pending> pending_;
  std::map<uint64_t, CommandReply> replies_;
  std::vector<CommandReply> progress_;  // progress messages not yet handed to a wait()
  std::map<uint64_t, std::string> errors_;  // request id -> the worker's error message
  std::vector<uint64_t> arrived_;           // replies received since wait() last looked
  uint64_t next_request_id_ = 1;
  uint64_t heartbeat_sequence_ = 0;
  uint64_t stack_dump_sequence_ = 0;
  std::map<std::string, std::map<std::string, double>> command_times_;  // worker -> command -> seconds
  std::function<void()> health_observer_;
  std::chrono::steady_clock::time_point next_observation_;
  uint64_t rejected_ = 0;
  RateLimitedWarning rejections_{"control channel: rejected messages"};
  std::chrono::steady_clock::time_point next_heartbeat_;
  std::chrono::steady_clock::time_point next_health_check_;
  std::chrono::steady_clock::time_point last_pump_;  // zero before the first pump
  bool shut_down_ = false;
};

}  // namespace tandem
