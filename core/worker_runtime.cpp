#include "core/worker_runtime.h"

#include "core/channel.h"
#include "core/command_codec.h"
#include "core/error.h"
#include "core/log.h"
#include "core/net_address.h"
#include "core/stack_dump.h"
#include "core/worker_commands.capnp.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <functional>
#include <thread>

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// Test-only commands, answered when the worker's environment has TANDEM_TEST_COMMANDS=1
// (unknown commands otherwise): they make the worker hang on purpose, so that the hang
// diagnosis tests see its stacks arrive. "test_hang" blocks the executor for good;
// "test_wedge_io" blocks the I/O thread for good (heartbeats stop, its own reply too).
bool test_commands_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TANDEM_TEST_COMMANDS");
    return value && std::string(value) == "1";
  }();
  return enabled;
}

namespace {

std::atomic<bool> wedge_io_requested{false};

// Distinctive names the tests look for in the stacks; noipa keeps them out of line and
// unmerged (GCC's identical code folding would otherwise name one after the other).
[[gnu::noipa]] void hang_in_test_command_for_stack_dump() {
  while (true) std::this_thread::sleep_for(std::chrono::hours(1));
}
[[gnu::noipa]] void wedge_io_thread_for_stack_dump() {
  while (true) std::this_thread::sleep_for(std::chrono::minutes(10));
}

bool run_test_command(const std::string& name) {
  if (!test_commands_enabled()) return false;
  if (name == "test_hang") hang_in_test_command_for_stack_dump();
  if (name != "test_wedge_io") return false;
  wedge_io_requested = true;
  return true;
}

std::atomic<bool> lost_controller{false};

// The I/O thread: socket to the controller on one side, inproc pair to the executor
// on the other. Ends when the executor says so (it forwards the executor's Shutdown).
void io_loop(zmq::context_t& context, const WorkerOptions& options, const std::string& pair_address,
             std::atomic<int>& exit_code) {
  ::pthread_setname_np(::pthread_self(), "tandem-io");
  StackDumpThreadLabel label("control I/O: heartbeats, messages");
  ChannelOptions channel_options;
  channel_options.max_message_bytes = options.max_message_bytes;
  Channel executor(context, Channel::Kind::dealer, channel_options);
  channel_options.curve = options.curve;
  Channel controller(context, Channel::Kind::dealer, channel_options);
  controller.connect(options.controller_address);
  executor.connect(pair_address);

  const std::string address = local_address_towards(options.controller_address);
  controller.send(RegisterMsg{options.id, static_cast<uint32_t>(::getpid()), this_hostname(), protocol_version(), address});
  log::info("registered with the controller at {} (from {}{})", options.controller_address, address,
            options.curve ? ", CURVE" : "");

  const auto interval = std::chrono::duration<double>(options.heartbeat_interval_s);
  const auto controller_timeout = std::chrono::duration<double>(options.controller_timeout_s);
  auto next_heartbeat = Clock::now();
  auto controller_seen = Clock::now();
  uint64_t sequence = 0;
  uint64_t stacks_reported = 0;  // the last dump id the controller was told about
  bool stopping = false;

  while (true) {
    auto now = Clock::now();
    if (now >= next_heartbeat) {
      controller.send(HeartbeatMsg{options.id, ++sequence});
      next_heartbeat = now + std::chrono::duration_cast<Clock::duration>(interval);
    }
    if (!stopping && controller.poll_handshake_failures() > 0) {
      log::error("the controller at {} refused this worker's CURVE key: exiting (is the key file this run's?)",
                 options.controller_address);
      exit_code = 1;
      stopping = true;
      executor.send(ShutdownMsg{"controller refused our key"});
    }
    if (!stopping && now - controller_seen > controller_timeout) {
      log::error("no heartbeat from the controller for {:.1f} s: it is gone, exiting", options.controller_timeout_s);
      exit_code = kExitLostController;
      lost_controller = true;
      stopping = true;
      executor.send(ShutdownMsg{"controller lost"});
    }
    zmq::pollitem_t items[] = {{controller.socket().handle(), 0, ZMQ_POLLIN, 0},
                               {executor.socket().handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, stack_dump_done_fd(), ZMQ_POLLIN, 0}};
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_heartbeat - Clock::now());
    try {
      zmq::poll(items, stack_dump_done_fd() >= 0 ? 3 : 2, std::max(wait, std::chrono::milliseconds(1)));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;  // a signal (a stack dump's capture): just go round again
      for (auto& item : items) item.revents = 0;
    }
    if (wedge_io_requested) wedge_io_thread_for_stack_dump();
    if (items[2].revents & ZMQ_POLLIN) {
      std::string summary;
      const uint64_t written = stack_dump_take_done(summary);
      if (written > stacks_reported) {
        controller.send(StacksDumpedMsg{written, options.id, summary});
        stacks_reported = written;
      }
    }

    if (items[0].revents & ZMQ_POLLIN) {
      while (auto in = controller.receive(0)) {
        controller_seen = Clock::now();
        if (std::holds_alternative<HeartbeatMsg>(in->message)) continue;
        if (auto* dump = std::get_if<DumpStacksMsg>(&in->message)) {
          log::warn("the controller asks for this worker's stacks: {}", dump->reason);
          stack_dump_request(dump->dump_id, dump->reason);
          continue;
        }
        if (std::holds_alternative<CommandMsg>(in->message) || std::holds_alternative<ShutdownMsg>(in->message)) {
          if (auto* s = std::get_if<ShutdownMsg>(&in->message)) {
            log::info("shutdown requested: {}", s->reason);
            stopping = true;
          }
          executor.send(in->message, in->attachments);
          continue;
        }
        log::warn("ignored a {} message from the controller", message_kind(in->message));
      }
    }
    if (items[1].revents & ZMQ_POLLIN) {
      while (auto out = executor.receive(0)) {
        if (std::holds_alternative<ShutdownMsg>(out->message)) return;  // the executor is done
        controller.send(out->message, out->attachments);
      }
    }
  }
}

// The executor: runs commands one at a time on the calling thread and replies to each.
// A running command may serve the commands that arrived meanwhile and that it accepts
// (serve_interleaved_commands); any others wait in `deferred` until it is done.
class Executor {
 public:
  Executor(Channel& io, const WorkerOptions& options, const CommandHandler& handler)
      : io_(io), options_(options), handler_(handler) {}

  // The next message: a deferred one first, else from the I/O thread.
  std::optional<Envelope> next(int timeout_ms) {
    if (!deferred_.empty()) {
      Envelope in = std::move(deferred_.front());
      deferred_.pop_front();
      return in;
    }
    return io_.receive(timeout_ms);
  }

  void execute(const Envelope& in) {
    const auto* command = std::get_if<CommandMsg>(&in.message);
    if (!command) return;
    const auto started = Clock::now();
    StackDumpRunningCommand running(command->name, command->request_id);
    try {
      CommandResult result;
      if (command->name == "ping") {
        result.body = command->body;
        result.attachments = in.attachments;
      } else if (command->name == "describe") {
        result.body = encode_body<wire::DescribeReply>([&](wire::DescribeReply::Builder out) {
          out.setRole(options_.id.role);
          out.setRank(static_cast<uint32_t>(options_.id.rank));
          out.setPid(static_cast<uint32_t>(::getpid()));
          out.setHost(this_hostname());
        });
      } else if (run_test_command(command->name)) {
        result.body = command->name;
      } else {
        result = run_handler(*command, in.attachments);
      }
      std::vector<uint64_t> sizes;
      for (const auto& a : result.attachments) sizes.push_back(a.size());
      io_.send(ReplyMsg{command->request_id, options_.id, std::move(result.body), sizes}, result.attachments);
      log::debug("command {} #{} done in {:.3f} s", command->name, command->request_id,
                 std::chrono::duration<double>(Clock::now() - started).count());
    } catch (const std::exception& e) {
      log::error("command {} #{} failed: {}", command->name, command->request_id, e.what());
      io_.send(ErrorReplyMsg{command->request_id, options_.id, e.what()});
    }
  }

  void serve_interleaved(const std::function<bool(const std::string&)>& may_interleave) {
    // Only what has arrived already. Once one message waits (now or from an earlier call),
    // everything after it waits too: nothing overtakes a deferred message.
    while (auto in = io_.receive(0)) {
      const auto* command = std::get_if<CommandMsg>(&in->message);
      if (command && deferred_.empty() && may_interleave(command->name)) {
        execute(*in);
      } else {
        deferred_.push_back(std::move(*in));
      }
    }
  }

  void send_progress(const std::string& body, const std::vector<std::string>& attachments) {
    if (running_.empty()) return;
    std::vector<uint64_t> sizes;
    for (const auto& a : attachments) sizes.push_back(a.size());
    io_.send(ProgressMsg{running_.back(), options_.id, body, sizes}, attachments);
  }

 private:
  CommandResult run_handler(const CommandMsg& command, const std::vector<std::string>& attachments) {
    running_.push_back(command.request_id);  // progress goes to the innermost running command
    try {
      CommandResult result = handler_(command, attachments);
      running_.pop_back();
      return result;
    } catch (...) {
      running_.pop_back();
      throw;
    }
  }

  Channel& io_;
  const WorkerOptions& options_;
  const CommandHandler& handler_;
  std::deque<Envelope> deferred_;
  std::vector<uint64_t> running_;  // request ids, outermost first
};

// The executor of this thread's run_worker, for the functions handlers call.
thread_local Executor* current_executor = nullptr;

}  // namespace

void send_command_progress(const std::string& body, const std::vector<std::string>& attachments) {
  if (current_executor) current_executor->send_progress(body, attachments);
}

void serve_interleaved_commands(const std::function<bool(const std::string&)>& may_interleave) {
  if (current_executor) current_executor->serve_interleaved(may_interleave);
}

bool worker_lost_controller() { return lost_controller; }

int run_worker(const WorkerOptions& options, const CommandHandler& handler) {
  stack_dump_install(options.id.name());  // before registering: the controller may send SIGUSR2 from then on
  StackDumpThreadLabel label("executor: runs commands");
  zmq::context_t context(1);
  ChannelOptions channel_options;
  channel_options.max_message_bytes = options.max_message_bytes;
  // The executor's end of the inproc pair is a ROUTER-free DEALER bound here; the I/O
  // thread's DEALER connects to it (DEALER-DEALER is a valid pair over inproc).
  Channel io(context, Channel::Kind::dealer, channel_options);
  const std::string pair_address = fmt::format("inproc://worker-executor-{}", static_cast<const void*>(&io));
  io.bind(pair_address);
  std::atomic<int> exit_code{0};
  std::atomic<bool> io_done{false};
  std::thread io_thread([&] {
    try {
      io_loop(context, options, pair_address, exit_code);
    } catch (const std::exception& e) {
      log::error("control I/O thread failed: {}", e.what());
      exit_code = 1;
    }
    io_done = true;
  });

  Executor executor(io, options, handler);
  current_executor = &executor;
  while (true) {
    auto in = executor.next(200);
    if (!in) {
      if (io_done) break;
      continue;
    }
    if (std::holds_alternative<ShutdownMsg>(in->message)) break;
    executor.execute(*in);
  }
  current_executor = nullptr;
  if (!io_done) io.send(ShutdownMsg{"executor done"});
  io_thread.join();
  log::info("{} stopped", options.id.name());
  return exit_code;
}

}  // namespace tandem
