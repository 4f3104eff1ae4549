#include "core/channel.h"

#include "core/error.h"
#include "core/log.h"

#include <zmq_addon.hpp>

#include <chrono>
#include <cstring>

namespace tandem {

std::string peer_label(const std::string& peer) {
  std::string out;
  for (unsigned char c : peer) out += fmt::format("{:02x}", c);
  return out.empty() ? "-" : out;
}

Channel::Channel(zmq::context_t& context, Kind kind, const ChannelOptions& options)
    : kind_(kind),
      options_(options),
      socket_(context, kind == Kind::router ? zmq::socket_type::router : zmq::socket_type::dealer) {
  socket_.set(zmq::sockopt::linger, 0);
  // ZeroMQ drops a peer that sends a bigger frame, before it is ever buffered.
  socket_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.max_message_bytes));
  if (kind == Kind::router) socket_.set(zmq::sockopt::router_mandatory, 1);
  // Control messages are small and latency-bound.
  socket_.set(zmq::sockopt::sndhwm, 100000);
  socket_.set(zmq::sockopt::rcvhwm, 100000);
  if (options.curve) {
    if (kind == Kind::router) {
      socket_.set(zmq::sockopt::curve_server, 1);
      socket_.set(zmq::sockopt::curve_secretkey, options.curve->own.secret_key);
      socket_.set(zmq::sockopt::zap_domain, kZapDomain);
    } else {
      socket_.set(zmq::sockopt::curve_serverkey, options.curve->server_public_key);
      socket_.set(zmq::sockopt::curve_publickey, options.curve->own.public_key);
      socket_.set(zmq::sockopt::curve_secretkey, options.curve->own.secret_key);
    }
    // Handshake failures are only visible as monitor events: both ends watch for them.
    const std::string monitor_address = fmt::format("inproc://channel-monitor-{}", static_cast<const void*>(this));
    const int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    if (zmq_socket_monitor(socket_.handle(), monitor_address.c_str(), events) != 0) {
      throw Error(fmt::format("cannot monitor the control channel: {}", zmq_strerror(zmq_errno())));
    }
    monitor_.emplace(context, zmq::socket_type::pair);
    monitor_->set(zmq::sockopt::linger, 0);
    monitor_->connect(monitor_address);
  }
}

std::string Channel::bind(const std::string& address) {
  try {
    socket_.bind(address);
  } catch (const zmq::error_t& e) {
    throw Error(fmt::format("cannot bind the control channel to {}: {}", address, e.what()));
  }
  return socket_.get(zmq::sockopt::last_endpoint);
}

void Channel::connect(const std::string& address) {
  try {
    socket_.connect(address);
  } catch (const zmq::error_t& e) {
    throw Error(fmt::format("cannot connect the control channel to {}: {}", address, e.what()));
  }
}

uint64_t Channel::poll_handshake_failures() {
  if (!monitor_) return 0;
  while (true) {
    // An event is two frames: 16-bit event id + 32-bit value, then the peer's endpoint.
    zmq::message_t event;
    if (!monitor_->recv(event, zmq::recv_flags::dontwait)) break;
    zmq::message_t endpoint;
    if (event.more()) (void)monitor_->recv(endpoint, zmq::recv_flags::none);
    if (event.size() < 6) continue;
    uint16_t id = 0;
    std::memcpy(&id, event.data(), sizeof id);
    ++handshake_failures_;
    const bool server = kind_ == Kind::router;
    const char* why = id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? (server ? "its CURVE key was refused" : "our CURVE key was refused")
                      : id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "the handshake protocol was broken"
                                                                  : "the CURVE handshake failed (an unkeyed peer, or the wrong server key?)";
    handshake_warnings_.warn(fmt::format("control channel: {} {}: {}",
                                         server ? "refused a connection on" : "the handshake with",
                                         endpoint.to_string(), why));
  }
  return handshake_failures_;
}

void Channel::reject(const std::string& peer, const std::string& why) {
  ++rejected_count_;
  last_rejection_ = why;
  rejections_.warn(fmt::format("control channel: dropped a frame from peer {}: {}", peer_label(peer), why));
}

bool Channel::parse(std::vector<zmq::message_t>& frames, Envelope& out) {
  size_t first = 0;
  if (kind_ == Kind::router) {
    out.peer = frames.empty() ? "" : frames[0].to_string();
    first = 1;
  }
  if (frames.size() <= first) {
    reject(out.peer, "no payload frame");
    return false;
  }
  zmq::message_t& payload = frames[first];
  out.user_id.clear();
  if (kind_ == Kind::router && options_.curve) {
    // Set by the ZAP handler for the connection; absent (a throw) on unauthenticated ones.
    try {
      out.user_id = payload.gets("User-Id");
    } catch (const zmq::error_t&) {
    }
  }
  DecodeLimits limits;
  limits.max_bytes = options_.max_message_bytes;
  std::string error;
  if (!decode_message(payload.data(), payload.size(), limits, out.message, error)) {
    reject(out.peer, error);
    return false;
  }
  const std::vector<uint64_t>& declared = message_attachments(out.message);
  size_t present = frames.size() - first - 1;
  if (present != declared.size()) {
    reject(out.peer, fmt::format("{} message declares {} attachment frames, {} arrived",
                                 message_kind(out.message), declared.size(), present));
    return false;
  }
  out.attachments.clear();
  for (size_t i = 0; i < present; ++i) {
    const zmq::message_t& frame = frames[first + 1 + i];
    if (frame.size() != declared[i]) {
      reject(out.peer, fmt::format("attachment {} has {} bytes, {} declared", i, frame.size(), declared[i]));
      return false;
    }
    out.attachments.emplace_back(static_cast<const char*>(frame.data()), frame.size());
  }
  return true;
}

std::optional<Envelope> Channel::receive(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    std::vector<zmq::message_t> frames;
    zmq::recv_result_t received;
    try {
      received = zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) return std::nullopt;  // a signal: let the caller look at it
      throw Error(fmt::format("control channel receive failed: {}", e.what()));
    }
    if (received) {
      Envelope envelope;
      if (parse(frames, envelope)) return envelope;
      continue;  // dropped a bad frame; look for the next one
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, left);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) return std::nullopt;
      throw Error(fmt::format("control channel poll failed: {}", e.what()));
    }
    if (!(item.revents & ZMQ_POLLIN)) return std::nullopt;
  }
}

bool Channel::send(const std::string& peer, const Message& message, const std::vector<std::string>& attachments) {
  TANDEM_CHECK(attachments.size() == message_attachments(message).size(),
               "{} message declares {} attachments but {} were given", message_kind(message),
               message_attachments(message).size(), attachments.size());
  std::string payload = encode_message(message);
  try {
    if (kind_ == Kind::router) socket_.send(zmq::buffer(peer), zmq::send_flags::sndmore);
    auto more = attachments.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
    // A DEALER with no peer blocks on send: never wait for one (a controller that refused
    // our key, or is gone, must not wedge the heartbeat loop).
    if (kind_ == Kind::dealer) {
      if (!socket_.send(zmq::buffer(payload), more | zmq::send_flags::dontwait)) return false;
    } else {
      socket_.send(zmq::buffer(payload), more);
    }
    for (size_t i = 0; i < attachments.size(); ++i) {
      auto flags = i + 1 == attachments.size() ? zmq::send_flags::none : zmq::send_flags::sndmore;
      socket_.send(zmq::buffer(attachments[i]), flags);
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return false;  // the peer disconnected
    throw Error(fmt::format("control channel send failed: {}", e.what()));
  }
  return true;
}

}  // namespace tandem
