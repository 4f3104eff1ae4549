#include "core/worker_runtime.h"

#include "core/channel.h"
#include "core/error.h"
#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

std::string hostname() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof buffer - 1);
  return buffer;
}

// The I/O thread: socket to the controller on one side, inproc pair to the executor
// on the other. Ends when the executor says so (it forwards the executor's Shutdown).
void io_loop(zmq::context_t& context, const WorkerOptions& options, const std::string& pair_address,
             std::atomic<int>& exit_code) {
  ChannelOptions channel_options;
  channel_options.max_message_bytes = options.max_message_bytes;
  Channel controller(context, Channel::Kind::dealer, channel_options);
  Channel executor(context, Channel::Kind::dealer, channel_options);
  controller.connect(options.controller_address);
  executor.connect(pair_address);

  controller.send(RegisterMsg{options.id, static_cast<uint32_t>(::getpid()), hostname(), protocol_version()});
  log::info("registered with the controller at {}", options.controller_address);

  const auto interval = std::chrono::duration<double>(options.heartbeat_interval_s);
  const auto controller_timeout = std::chrono::duration<double>(options.controller_timeout_s);
  auto next_heartbeat = Clock::now();
  auto controller_seen = Clock::now();
  uint64_t sequence = 0;
  bool stopping = false;

  while (true) {
    auto now = Clock::now();
    if (now >= next_heartbeat) {
      controller.send(HeartbeatMsg{options.id, ++sequence});
      next_heartbeat = now + std::chrono::duration_cast<Clock::duration>(interval);
    }
    if (!stopping && now - controller_seen > controller_timeout) {
      log::error("no heartbeat from the controller for {:.1f} s: it is gone, exiting", options.controller_timeout_s);
      exit_code = 1;
      stopping = true;
      executor.send(ShutdownMsg{"controller lost"});
    }
    zmq::pollitem_t items[] = {{controller.socket().handle(), 0, ZMQ_POLLIN, 0},
                               {executor.socket().handle(), 0, ZMQ_POLLIN, 0}};
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_heartbeat - Clock::now());
    zmq::poll(items, 2, std::max(wait, std::chrono::milliseconds(1)));

    if (items[0].revents & ZMQ_POLLIN) {
      while (auto in = controller.receive(0)) {
        controller_seen = Clock::now();
        if (std::holds_alternative<HeartbeatMsg>(in->message)) continue;
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

// Set while the executor runs a command: where send_command_progress goes.
thread_local std::function<void(const std::string&, const std::vector<std::string>&)>* current_progress = nullptr;

}  // namespace

void send_command_progress(const std::string& body, const std::vector<std::string>& attachments) {
  if (current_progress) (*current_progress)(body, attachments);
}

int run_worker(const WorkerOptions& options, const CommandHandler& handler) {
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

  const std::string name = options.id.name();
  while (true) {
    auto in = io.receive(200);
    if (!in) {
      if (io_done) break;
      continue;
    }
    if (std::holds_alternative<ShutdownMsg>(in->message)) break;
    const auto* command = std::get_if<CommandMsg>(&in->message);
    if (!command) continue;
    auto started = Clock::now();
    try {
      CommandResult result;
      if (command->name == "ping") {
        result.body = command->body;
        result.attachments = in->attachments;
      } else if (command->name == "describe") {
        result.body = fmt::format("{{\"role\":\"{}\",\"rank\":{},\"pid\":{},\"host\":\"{}\"}}", options.id.role,
                                  options.id.rank, ::getpid(), hostname());
      } else {
        std::function<void(const std::string&, const std::vector<std::string>&)> progress =
            [&](const std::string& body, const std::vector<std::string>& attachments) {
              std::vector<uint64_t> sizes;
              for (const auto& a : attachments) sizes.push_back(a.size());
              io.send(ProgressMsg{command->request_id, options.id, body, sizes}, attachments);
            };
        current_progress = &progress;
        try {
          result = handler(*command, in->attachments);
        } catch (...) {
          current_progress = nullptr;
          throw;
        }
        current_progress = nullptr;
      }
      std::vector<uint64_t> sizes;
      for (const auto& a : result.attachments) sizes.push_back(a.size());
      io.send(ReplyMsg{command->request_id, options.id, std::move(result.body), sizes}, result.attachments);
      log::debug("command {} #{} done in {:.3f} s", command->name, command->request_id,
                 std::chrono::duration<double>(Clock::now() - started).count());
    } catch (const std::exception& e) {
      log::error("command {} #{} failed: {}", command->name, command->request_id, e.what());
      io.send(ErrorReplyMsg{command->request_id, options.id, e.what()});
    }
  }
  if (!io_done) io.send(ShutdownMsg{"executor done"});
  io_thread.join();
  log::info("{} stopped", name);
  return exit_code;
}

}  // namespace tandem
