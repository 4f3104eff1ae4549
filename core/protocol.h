// Control-plane messages as plain C++ values, and their Cap'n Proto encoding.
//
// Modules build and read these structs; only protocol.cpp sees the generated capnp
// headers. decode_message() never trusts its input: truncated, misaligned, oversized,
// too deeply nested or unknown messages come back as an error string, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace tandem {

uint32_t protocol_version();

struct WorkerId {
  std::string role;
  uint32_t rank = 0;
  std::string name() const { return role + "-" + std::to_string(rank); }  // "rollout-3"
  bool operator==(const WorkerId& o) const { return role == o.role && rank == o.rank; }
  bool operator<(const WorkerId& o) const { return role != o.role ? role < o.role : rank < o.rank; }
};

struct RegisterMsg {
  WorkerId worker;
  uint32_t pid = 0;
  std::string hostname;
  uint32_t protocol_version = 0;
  std::string address;  // where peers reach this worker (its route to the controller); see protocol.capnp
};

struct HeartbeatMsg {
  WorkerId worker;
  uint64_t sequence = 0;
};

struct CommandMsg {
  uint64_t request_id = 0;
  std::string name;
  std::string body;
  std::vector<uint64_t> attachments;
};

struct ReplyMsg {
  uint64_t request_id = 0;
  WorkerId worker;
  std::string body;
  std::vector<uint64_t> attachments;
};

struct ErrorReplyMsg {
  uint64_t request_id = 0;
  WorkerId worker;
  std::string message;
};

struct ShutdownMsg {
  std::string reason;
};

// Part of a command's result, before its ReplyMsg; the fields mean what ReplyMsg's do.
struct ProgressMsg {
  uint64_t request_id = 0;
  WorkerId worker;
  std::string body;
  std::vector<uint64_t> attachments;
};

// Controller to worker: write every thread's stack into the log (see protocol.capnp).
struct DumpStacksMsg {
  uint64_t dump_id = 0;
  std::string reason;
};

// Worker to controller: dump `dump_id` is written.
struct StacksDumpedMsg {
  uint64_t dump_id = 0;
  WorkerId worker;
  std::string summary;
};

using Message = std::variant<RegisterMsg, HeartbeatMsg, CommandMsg, ReplyMsg, ErrorReplyMsg, ShutdownMsg, ProgressMsg,
                             DumpStacksMsg, StacksDumpedMsg>;

// "register", "heartbeat", ... for logs.
const char* message_kind(const Message& message);

// Sizes of the attachment frames a message declares (empty for kinds without them).
const std::vector<uint64_t>& message_attachments(const Message& message);

struct DecodeLimits {
  size_t max_bytes = 64u << 20;
  int nesting_limit = 16;
};

std::string encode_message(const Message& message);

// Returns false and sets `error` when the bytes are not one valid Message.
bool decode_message(const void* data, size_t size, const DecodeLimits& limits, Message& out,
                    std::string& error);

}  // namespace tandem
