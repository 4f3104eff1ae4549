// ZeroMQ transport for control messages: the controller binds a ROUTER, each worker
// connects a DEALER. A wire message is [identity (ROUTER side only)] [Message]
// [attachment frames...]; the attachment sizes are declared inside the Message.
//
// Receiving never trusts the peer: a frame that is not a valid Message, carries the
// wrong number or sizes of attachments, or exceeds the size limit is dropped, counted
// and logged, and receive() goes on waiting. Not thread-safe: one thread per channel.
#pragma once

#include "core/rate_limited_log.h"

#include "core/curve_auth.h"
#include "core/protocol.h"

#include <zmq.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tandem {

struct ChannelOptions {
  size_t max_message_bytes = 64u << 20;
  // CURVE (curve_auth.h): the ROUTER becomes a CURVE server with `own` (its peers are
  // admitted by the context's CurveAuthenticator); a DEALER a client of server_public_key.
  std::optional<CurveKeys> curve;
};

struct Envelope {
  std::string peer;  // ZeroMQ routing id of the sender (ROUTER side), empty on DEALER side
  std::string user_id;  // CURVE: the worker name its key was admitted as; empty without CURVE
  Message message;
  std::vector<std::string> attachments;
};

class Channel {
 public:
  enum class Kind { router, dealer };
  Channel(zmq::context_t& context, Kind kind, const ChannelOptions& options = {});

  // ROUTER: binds, returning the resolved endpoint (tcp://127.0.0.1:* picks a free port).
  std::string bind(const std::string& address);
  void connect(const std::string& address);

  // Waits up to timeout_ms (0: do not wait) for one valid message.
  std::optional<Envelope> receive(int timeout_ms);
  // ROUTER: `peer` names the destination. Returns false when the peer is gone.
  bool send(const std::string& peer, const Message& message, const std::vector<std::string>& attachments = {});
  bool send(const Message& message, const std::vector<std::string>& attachments = {}) {
    return send("", message, attachments);
  }

  uint64_t rejected_count() const { return rejected_count_; }
  // Connections whose handshake failed (CURVE refused the key, or the peer spoke no
  // CURVE): each logged with the peer's address. Counted as poll_handshake_failures()
  // reads the socket's monitor events; only on a ROUTER with CURVE.
  uint64_t poll_handshake_failures();
  const std::string& last_rejection() const { return last_rejection_; }
  zmq::socket_t& socket() { return socket_; }

 private:
  bool parse(std::vector<zmq::message_t>& frames, Envelope& out);
  void reject(const std::string& peer, const std::string& why);

  Kind kind_;
  ChannelOptions options_;
  zmq::socket_t socket_;
  std::optional<zmq::socket_t> monitor_;  // PAIR receiving socket_'s handshake-failure events
  uint64_t handshake_failures_ = 0;
  uint64_t rejected_count_ = 0;
  RateLimitedWarning rejections_{"control channel: dropped frames"};
  RateLimitedWarning handshake_warnings_{"control channel: failed handshakes"};
  std::string last_rejection_;
};

// A printable form of a ZeroMQ routing id (binary by default).
std::string peer_label(const std::string& peer);

}  // namespace tandem
