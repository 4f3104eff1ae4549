#include "controller/workers/worker_pool.h"

#include "controller/run/run_status.h"
#include "core/config.h"
#include "core/log.h"
#include "core/net_address.h"
#include "core/process.h"
#include "core/signals.h"
#include "core/stack_dump.h"
#include "core/worker_runtime.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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

const char* signal_word(int signal) { return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace

PoolOptions pool_options_from_config(const LauncherConfig& c, const std::string& log_dir,
                                     const std::string& socket_dir) {
  PoolOptions o;
  o.bind_address = c.transport == "ipc" ? fmt::format("ipc://{}/control.sock", socket_dir) : "tcp://127.0.0.1:*";
  o.log_dir = log_dir;
  o.register_timeout_s = c.register_timeout_s;
  o.heartbeat_interval_s = c.heartbeat_interval_s;
  o.heartbeat_timeout_s = c.heartbeat_timeout_s;
  o.command_timeout_s = c.command_timeout_s;
  o.shutdown_grace_s = c.shutdown_grace_s;
  o.hang_stacks_timeout_s = c.hang_stacks_timeout_s;
  o.max_message_bytes = static_cast<size_t>(c.max_message_mb) << 20;
  return o;
}

WorkerFailure::WorkerFailure(WorkerId worker, int pid, std::string reason, const std::string& log_path,
                             bool command_error)
    : Error(fmt::format("worker {} (role {}, rank {}, pid {}) {}; its log: {}", worker.name(), worker.role,
                        worker.rank, pid, reason, log_path)),
      worker_(std::move(worker)),
      pid_(pid),
      reason_(std::move(reason)),
      log_path_(log_path),
      command_error_(command_error) {}

StopRequested::StopRequested(int signal, int64_t step)
    : Error(fmt::format("stopped after step {} on {}, with a checkpoint", step,
                        signal == 0 ? "request (tandem stop)" : signal_word(signal))),
      signal_(signal),
      step_(step) {}

WorkerPool::WorkerPool(PoolOptions options, std::unique_ptr<Launcher> launcher)
    : options_(std::move(options)),
      launcher_(std::move(launcher)),
      context_(1),
      authenticator_(options_.keys ? std::make_unique<CurveAuthenticator>(context_, options_.keys->worker_public_keys)
                                   : nullptr),
      channel_(context_, Channel::Kind::router,
               ChannelOptions{options_.max_message_bytes,
                              options_.keys ? std::optional<CurveKeys>(options_.keys->controller) : std::nullopt}) {
  address_ = channel_.bind(options_.bind_address);
  if (!options_.advertised_address.empty()) address_ = options_.advertised_address;
}

WorkerPool::~WorkerPool() {
  try {
    if (!shut_down_) {
      options_.shutdown_grace_s = std::min(options_.shutdown_grace_s, 1.0);
      shutdown("controller is exiting");
    }
  } catch (const std::exception& e) {
    log::error("worker shutdown failed: {}", e.what());
  }
}

std::string WorkerPool::log_path(const WorkerId& id) const { return fmt::format("{}/{}.log", options_.log_dir, id.name()); }

LaunchRequest WorkerPool::launch_request(const WorkerId& id) const {
  return LaunchRequest{id, address_, log_path(id), options_.heartbeat_interval_s,
                       // Workers outlive a slow controller event loop by a wide margin.
                       std::max(options_.heartbeat_timeout_s, 5.0 * options_.heartbeat_interval_s),
                       options_.max_message_bytes,
                       options_.keys ? options_.keys->worker_key_path(id.name()) : std::string(),
                       options_.roles_computing_alone.count(id.role) > 0};
}

void WorkerPool::start(const std::vector<WorkerId>& ids) {
  for (const WorkerId& id : ids) {
    TANDEM_CHECK(!find(id), "worker {} listed twice", id.name());
    Worker w;
    w.status.id = id;
    w.status.pid = launcher_->launch(launch_request(id));
    w.last_seen = Clock::now();
    workers_.push_back(std::move(w));
  }
  log::info("launched {} workers; waiting for them to register at {}", ids.size(), address_);
  wait_registered(ids);
}

void WorkerPool::restart(const WorkerId& id) { restart(std::vector<WorkerId>{id}); }

void WorkerPool::restart(const std::vector<WorkerId>& ids) {
  for (const WorkerId& id : ids) relaunch(id);
  wait_registered(ids);  // together: each start-up takes a while, and they overlap
}

void WorkerPool::relaunch(const WorkerId& id) {
  Worker* w = find(id);
  TANDEM_CHECK(w != nullptr, "no worker {}", id.name());
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.worker == id) {
      replies_.erase(it->first);
      errors_.erase(it->first);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  const int old_pid = w->status.pid;
  const int64_t restarts = w->status.restarts + 1;
  w->status = WorkerStatus{};
  w->status.id = id;
  w->status.restarts = restarts;
  w->peer.clear();
  w->lost_controller = false;
  w->status.pid = launcher_->launch(launch_request(id));  // ends and reaps the old process first
  w->last_seen = Clock::now();
  log::warn("restarted worker {} (pid {} -> {})", id.name(), old_pid, w->status.pid);
}

void WorkerPool::forget(uint64_t id) {
  pending_.erase(id);
  replies_.erase(id);
  errors_.erase(id);
}

void WorkerPool::wait_registered(const std::vector<WorkerId>& ids) {
  auto started = Clock::now();
  while (true) {
    bool all = true;
    for (const WorkerId& id : ids) {
      Worker& w = *find(id);
      if (w.status.state == WorkerState::failed || w.status.state == WorkerState::stopped) throw failure_of(w);
      all = all && w.status.state == WorkerState::ready;
    }
    if (all) break;
    if (seconds_since(started) > options_.register_timeout_s) {
      for (const WorkerId& id : ids) {
        Worker& w = *find(id);
        if (w.status.state == WorkerState::starting) {
          fail(w, fmt::format("did not register within {} s (launcher.register_timeout_s)", options_.register_timeout_s));
          throw failure_of(w);
        }
      }
    }
    pump(50);
  }
  log::info("{} workers registered in {:.2f} s", ids.size(), seconds_since(started));
}

uint64_t WorkerPool::send(const WorkerId& id, const std::string& name, const std::string& body,
                          const std::vector<std::string>& attachments) {
  Worker* w = find(id);
  TANDEM_CHECK(w != nullptr, "no worker {}", id.name());
  if (w->status.state != WorkerState::ready) throw failure_of(*w);
  uint64_t request_id = next_request_id_++;
  std::vector<uint64_t> sizes;
  for (const auto& a : attachments) sizes.push_back(a.size());
  pending_[request_id] = Pending{id, name, Clock::now()};
  if (!channel_.send(w->peer, CommandMsg{request_id, name, body, sizes}, attachments)) {
    // Usually the process has ended: say how (reaping records "died: ..."), not just that it is gone.
    reap_ended_workers();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    reap_ended_workers();
    fail(*w, fmt::format("disconnected before command {} could be sent", name));  // no-op once it is failed
  }
  return request_id;
}

std::map<uint64_t, CommandReply> WorkerPool::wait(const std::vector<uint64_t>& request_ids,
                                                  const ProgressHandler& on_progress) {
  // Requests still unanswered; replies and errors that arrive are crossed off as they
  // come, so a wait over many requests costs O(replies), not O(requests) per event.
  std::set<uint64_t> remaining;
  for (uint64_t id : request_ids) {
    TANDEM_CHECK(pending_.count(id), "wait: request {} is unknown (answered already, or its worker was restarted)", id);
    if (!replies_.count(id)) remaining.insert(id);  // replies that came during an earlier wait count
  }
  auto next_timeout_check = Clock::now();
  while (true) {
    for (uint64_t id : arrived_) remaining.erase(id);
    arrived_.clear();
    if (!progress_.empty()) {
      std::vector<CommandReply> progress = std::move(progress_);
      progress_.clear();
      for (CommandReply& p : progress) {
        // Progress of requests this wait is not about is dropped: nobody asked for it.
        if (on_progress && std::count(request_ids.begin(), request_ids.end(), p.reply.request_id)) {
          on_progress(std::move(p));
        }
      }
    }
    for (const auto& [id, message] : errors_) {
      if (!std::count(request_ids.begin(), request_ids.end(), id)) continue;
      const Pending& p = pending_.at(id);
      const Worker* w = find(p.worker);
      throw WorkerFailure(p.worker, w ? w->status.pid : 0,
                          fmt::format("failed command \"{}\" (request {}): {}", p.name, id, message),
                          log_path(p.worker), /*command_error=*/true);
    }
    if (remaining.empty()) break;
    if (auto failure = first_failure()) throw *failure;
    if (Clock::now() >= next_timeout_check) {
      std::vector<Hang> hangs;  // one per worker: its oldest late request
      for (uint64_t id : remaining) {
        const Pending& p = pending_.at(id);
        const bool listed = std::any_of(hangs.begin(), hangs.end(), [&](const Hang& h) { return h.id == p.worker; });
        if (!listed && seconds_since(p.sent) > options_.command_timeout_s) {
          hangs.push_back({p.worker, fmt::format("did not answer command \"{}\" (request {}) within {} s "
                                                 "(launcher.command_timeout_s)",
                                                 p.name, id, options_.command_timeout_s)});
        }
      }
      if (!hangs.empty()) fail_hung(hangs);
      next_timeout_check = Clock::now() + std::chrono::milliseconds(100);
    }
    pump(static_cast<int>(std::max(1.0, options_.heartbeat_interval_s * 500)));
  }
  std::map<uint64_t, CommandReply> out;
  for (uint64_t id : request_ids) {
    out[id] = std::move(replies_.at(id));
    replies_.erase(id);
    pending_.erase(id);
  }
  return out;
}

std::vector<CommandReply> WorkerPool::call_all(const std::string& name, const std::string& body) {
  std::vector<uint64_t> ids;
  for (const Worker& w : workers_) ids.push_back(send(w.status.id, name, body));
  auto replies = wait(ids);
  std::vector<CommandReply> ordered;
  for (uint64_t id : ids) ordered.push_back(std::move(replies.at(id)));
  return ordered;
}

void WorkerPool::poll_events(double seconds) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  do {
    pump(10);
  } while (Clock::now() < deadline);
}

void WorkerPool::shutdown(const std::string& reason) {
  if (shut_down_) return;
  shut_down_ = true;
  for (Worker& w : workers_) {
    if (w.status.state == WorkerState::ready) channel_.send(w.peer, ShutdownMsg{reason});
  }
  launcher_->stop_all(options_.shutdown_grace_s);
  for (Worker& w : workers_) {
    if (w.status.state != WorkerState::failed) w.status.state = WorkerState::stopped;
  }
  log::info("all workers stopped ({})", reason);
}

std::vector<WorkerStatus> WorkerPool::status() const {
  std::vector<WorkerStatus> out;
  for (const Worker& w : workers_) out.push_back(w.status);
  return out;
}

std::optional<WorkerFailure> WorkerPool::first_failure() const {
  for (const Worker& w : workers_) {
    if (w.status.state == WorkerState::failed) return failure_of(w);
  }
  return std::nullopt;
}

WorkerFailure WorkerPool::failure_of(const Worker& w) const {
  std::string reason = w.status.state == WorkerState::failed ? w.status.failure
                       : w.status.state == WorkerState::stopped ? "has been stopped"
                                                                 : "is not ready";
  WorkerFailure failure(w.status.id, w.status.pid, reason, log_path(w.status.id));
  if (w.lost_controller) failure.set_lost_controller();
  return failure;
}

const WorkerStatus& WorkerPool::worker_status(const WorkerId& id) const {
  for (const Worker& w : workers_)
    if (w.status.id == id) return w.status;
  throw Error(fmt::format("no worker {}", id.name()));
}

WorkerPool::Worker* WorkerPool::find(const WorkerId& id) {
  for (Worker& w : workers_)
    if (w.status.id == id) return &w;
  return nullptr;
}

WorkerPool::Worker* WorkerPool::find_peer(const std::string& peer) {
  for (Worker& w : workers_)
    if (!w.peer.empty() && w.peer == peer) return &w;
  return nullptr;
}

void WorkerPool::fail(Worker& w, const std::string& reason) {
  if (w.status.state == WorkerState::failed) return;
  w.status.state = WorkerState::failed;
  w.status.failure = reason;
  log::error("worker {} (pid {}) {}", w.status.id.name(), w.status.pid, reason);
  // A hung or misbehaving worker is ended now, so that it leaves nothing running.
  launcher_->send_signal(w.status.id, SIGKILL);
}

void WorkerPool::reject(const std::string& peer, const std::string& why) {
  ++rejected_;
  rejections_.warn(fmt::format("control channel: rejected a message from peer {}: {}", peer_label(peer), why));
}

void WorkerPool::handle(Envelope& e) {
  Worker* sender = find_peer(e.peer);
  if (auto* r = std::get_if<RegisterMsg>(&e.message)) {
    Worker* w = find(r->worker);
    if (sender) return reject(e.peer, fmt::format("{} registered twice", sender->status.id.name()));
    if (!w) return reject(e.peer, fmt::format("registration from unexpected worker {}", r->worker.name()));
    if (w->status.state != WorkerState::starting) {
      return reject(e.peer, fmt::format("registration for {} which is {}", r->worker.name(),
                                        w->status.state == WorkerState::ready ? "already registered" : "not starting"));
    }
    if (options_.keys && e.user_id != r->worker.name()) {
      return reject(e.peer, fmt::format("registration for {} from a peer keyed as {}", r->worker.name(),
                                        e.user_id.empty() ? "nobody" : e.user_id));
    }
    if (w->status.pid != 0 && static_cast<int>(r->pid) != w->status.pid) {
      return reject(e.peer, fmt::format("registration for {} from pid {}, but the launcher started pid {}",
                                        r->worker.name(), r->pid, w->status.pid));
    }
    // Only now is the sender (as far as the transport can tell) the worker it names: a
    // stranger's wrong version is its own rejection, never the worker's failure.
    if (r->protocol_version != protocol_version()) {
      fail(*w, fmt::format("speaks protocol version {}, the controller {}", r->protocol_version, protocol_version()));
      return;
    }
    w->peer = e.peer;
    w->status.pid = static_cast<int>(r->pid);
    w->status.state = WorkerState::ready;
    w->status.hostname = r->hostname;
    w->status.address = r->address.empty() ? "127.0.0.1" : r->address;
    w->last_seen = Clock::now();
    w->status.last_heartbeat_unix = unix_now();
    log::info("{} registered (pid {} on {}, {})", r->worker.name(), r->pid, r->hostname, w->status.address);
    return;
  }
  if (!sender) return reject(e.peer, fmt::format("{} message from an unknown sender", message_kind(e.message)));
  sender->last_seen = Clock::now();
  sender->status.last_heartbeat_unix = unix_now();
  if (std::holds_alternative<HeartbeatMsg>(e.message)) return;
  if (auto* dumped = std::get_if<StacksDumpedMsg>(&e.message)) {
    sender->stacks_dumped = std::max(sender->stacks_dumped, dumped->dump_id);
    log::info("{} wrote stack dump {} into its log ({})", sender->status.id.name(), dumped->dump_id, dumped->summary);
    return;
  }
  if (auto* reply = std::get_if<ReplyMsg>(&e.message)) {
    auto p = pending_.find(reply->request_id);
    if (p == pending_.end() || !(p->second.worker == sender->status.id)) {
      return reject(e.peer, fmt::format("reply to unknown request {} from {}", reply->request_id,
                                        sender->status.id.name()));
    }
    uint64_t id = reply->request_id;
    const double seconds = seconds_since(p->second.sent);
    command_times_[sender->status.id.name()][p->second.name] += seconds;
    replies_[id] = CommandReply{std::move(*reply), std::move(e.attachments), seconds};
    arrived_.push_back(id);
    return;
  }
  if (auto* progress = std::get_if<ProgressMsg>(&e.message)) {
    auto p = pending_.find(progress->request_id);
    if (p == pending_.end() || !(p->second.worker == sender->status.id)) return;  // a request since forgotten
    progress_.push_back(CommandReply{
        ReplyMsg{progress->request_id, progress->worker, std::move(progress->body), std::move(progress->attachments)},
        std::move(e.attachments), seconds_since(p->second.sent)});
    return;
  }
  if (auto* error = std::get_if<ErrorReplyMsg>(&e.message)) {
    if (pending_.count(error->request_id) && pending_.at(error->request_id).worker == sender->status.id) {
      errors_[error->request_id] = error->message;
    } else {
      fail(*sender, fmt::format("reported an error: {}", error->message));
    }
    return;
  }
  reject(e.peer, fmt::format("workers may not send {} messages", message_kind(e.message)));
}

void WorkerPool::reap_ended_workers() {
  for (auto& [id, exit] : launcher_->reap()) {
    Worker* w = find(id);
    if (!w || shut_down_) continue;
    if (w->status.state == WorkerState::failed) continue;  // already explained (hung, killed by us)
    w->lost_controller = exit.signal == 0 && exit.exit_code == kExitLostController;
    const std::string how = w->lost_controller ? exit.describe() + ": it heard nothing from the controller for its "
                                                                   "controller timeout (launcher.heartbeat_timeout_s)"
                                               : exit.describe();
    fail(*w, w->status.state == WorkerState::starting ? "died before registering: " + how : "died: " + how);
  }
}

void WorkerPool::receive_messages(int timeout_ms) {
  if (auto first = channel_.receive(timeout_ms)) {
    handle(*first);
    while (auto next = channel_.receive(0)) handle(*next);
  }
  channel_.poll_handshake_failures();  // logs each refused connection as it happens
}

void WorkerPool::send_heartbeats_if_due() {
  auto now = Clock::now();
  if (now < next_heartbeat_) return;
  ++heartbeat_sequence_;
  for (Worker& w : workers_) {
    if (w.status.state == WorkerState::ready) {
      channel_.send(w.peer, HeartbeatMsg{WorkerId{"controller", 0}, heartbeat_sequence_});
    }
  }
  next_heartbeat_ = now + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(options_.heartbeat_interval_s));
}

void WorkerPool::excuse_own_stall() {
  const auto now = Clock::now();
  const double deaf_s =
      last_pump_ == Clock::time_point{} ? 0.0 : std::chrono::duration<double>(now - last_pump_).count();
  if (deaf_s > options_.heartbeat_timeout_s) {
    // While it was stopped the workers' heartbeats waited in their queues (some may not
    // have reached this socket yet), and workers that gave up on it are exiting with
    // kExitLostController: neither is a hang. A worker really hung is still found one
    // timeout from now, and one that exited is reaped with its exit status.
    log::warn("the controller did not listen to its workers for {:.1f} s (stopped or starved): their heartbeat "
              "clocks restart now", deaf_s);
    for (Worker& w : workers_) w.last_seen = now;
  }
  last_pump_ = now;
}

void WorkerPool::pump(int timeout_ms) {
  if (int signal = pending_interrupt()) throw Interrupted(signal);
  excuse_own_stall();
  int wait_ms = std::min(timeout_ms, std::max(1, static_cast<int>(options_.heartbeat_interval_s * 1000 / 2)));
  receive_messages(wait_ms);
  send_heartbeats_if_due();
  // Child exits and heartbeat ages change slowly: look every 10 ms, not every event.
  auto now = Clock::now();
  if (now < next_health_check_) return;
  next_health_check_ = now + std::chrono::milliseconds(10);
  if (health_observer_ && now >= next_observation_) {
    next_observation_ = now + std::chrono::seconds(1);
    health_observer_();
  }
  reap_ended_workers();
  std::vector<Hang> hangs;
  for (Worker& w : workers_) {
    if (w.status.state != WorkerState::ready) continue;
    double silent = seconds_since(w.last_seen);
    if (silent > options_.heartbeat_timeout_s) {
      hangs.push_back({w.status.id, fmt::format("is hung: no heartbeat for {:.1f} s (launcher.heartbeat_timeout_s {}){}",
                                                silent, options_.heartbeat_timeout_s, unanswered_command(w.status.id))});
    }
  }
  if (!hangs.empty()) fail_hung(hangs);
}

}  // namespace tandem
