#include "core/protocol.h"

#include "core/protocol.capnp.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>
#include <kj/exception.h>

#include <cstring>

namespace tandem {
namespace {

void set_worker(wire::WorkerId::Builder b, const WorkerId& w) {
  b.setRole(w.role);
  b.setRank(w.rank);
}
WorkerId get_worker(wire::WorkerId::Reader r) { return {r.getRole(), r.getRank()}; }

capnp::Data::Reader as_data(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}
std::string from_data(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}

template <class Builder>
void set_attachments(Builder b, const std::vector<uint64_t>& sizes) {
  auto list = b.initAttachments(static_cast<unsigned>(sizes.size()));
  for (size_t i = 0; i < sizes.size(); ++i) list.set(static_cast<unsigned>(i), sizes[i]);
}
template <class Reader>
std::vector<uint64_t> get_attachments(Reader r) {
  std::vector<uint64_t> sizes;
  for (uint64_t s : r.getAttachments()) sizes.push_back(s);
  return sizes;
}

struct Encoder {
  wire::Message::Builder m;
  void operator()(const RegisterMsg& v) {
    auto b = m.initRegister();
    set_worker(b.initWorker(), v.worker);
    b.setPid(v.pid);
    b.setHostname(v.hostname);
    b.setProtocolVersion(v.protocol_version);
    b.setAddress(v.address);
  }
  void operator()(const HeartbeatMsg& v) {
    auto b = m.initHeartbeat();
    set_worker(b.initWorker(), v.worker);
    b.setSequence(v.sequence);
  }
  void operator()(const CommandMsg& v) {
    auto b = m.initCommand();
    b.setRequestId(v.request_id);
    b.setName(v.name);
    b.setBody(as_data(v.body));
    set_attachments(b, v.attachments);
  }
  void operator()(const ReplyMsg& v) {
    auto b = m.initReply();
    b.setRequestId(v.request_id);
    set_worker(b.initWorker(), v.worker);
    b.setBody(as_data(v.body));
    set_attachments(b, v.attachments);
  }
  void operator()(const ErrorReplyMsg& v) {
    auto b = m.initError();
    b.setRequestId(v.request_id);
    set_worker(b.initWorker(), v.worker);
    b.setMessage(v.message);
  }
  void operator()(const ShutdownMsg& v) { m.initShutdown().setReason(v.reason); }
  void operator()(const ProgressMsg& v) {
    auto b = m.initProgress();
    b.setRequestId(v.request_id);
    set_worker(b.initWorker(), v.worker);
    b.setBody(as_data(v.body));
    set_attachments(b, v.attachments);
  }
  void operator()(const DumpStacksMsg& v) {
    auto b = m.initDumpStacks();
    b.setDumpId(v.dump_id);
    b.setReason(v.reason);
  }
  void operator()(const StacksDumpedMsg& v) {
    auto b = m.initStacksDumped();
    b.setDumpId(v.dump_id);
    set_worker(b.initWorker(), v.worker);
    b.setSummary(v.summary);
  }
};

Message read_message(wire::Message::Reader r) {
  switch (r.which()) {
    case wire::Message::REGISTER: {
      auto v = r.getRegister();
      return RegisterMsg{get_worker(v.getWorker()), v.getPid(), v.getHostname(), v.getProtocolVersion(),
                         v.getAddress()};
    }
    case wire::Message::HEARTBEAT: {
      auto v = r.getHeartbeat();
      return HeartbeatMsg{get_worker(v.getWorker()), v.getSequence()};
    }
    case wire::Message::COMMAND: {
      auto v = r.getCommand();
      return CommandMsg{v.getRequestId(), v.getName(), from_data(v.getBody()), get_attachments(v)};
    }
    case wire::Message::REPLY: {
      auto v = r.getReply();
      return ReplyMsg{v.getRequestId(), get_worker(v.getWorker()), from_data(v.getBody()), get_attachments(v)};
    }
    case wire::Message::ERROR: {
      auto v = r.getError();
      return ErrorReplyMsg{v.getRequestId(), get_worker(v.getWorker()), v.getMessage()};
    }
    case wire::Message::SHUTDOWN:
      return ShutdownMsg{r.getShutdown().getReason()};
    case wire::Message::PROGRESS: {
      auto v = r.getProgress();
      return ProgressMsg{v.getRequestId(), get_worker(v.getWorker()), from_data(v.getBody()), get_attachments(v)};
    }
    case wire::Message::DUMP_STACKS: {
      auto v = r.getDumpStacks();
      return DumpStacksMsg{v.getDumpId(), v.getReason()};
    }
    case wire::Message::STACKS_DUMPED: {
      auto v = r.getStacksDumped();
      return StacksDumpedMsg{v.getDumpId(), get_worker(v.getWorker()), v.getSummary()};
    }
  }
  throw std::runtime_error(fmt::format("unknown message kind {} (newer protocol?)", static_cast<int>(r.which())));
}

}  // namespace

uint32_t protocol_version() { return wire::PROTOCOL_VERSION; }

const char* message_kind(const Message& message) {
  static const char* names[] = {"register", "heartbeat", "command", "reply", "error", "shutdown", "progress",
                                "dump_stacks", "stacks_dumped"};
  return names[message.index()];
}

const std::vector<uint64_t>& message_attachments(const Message& message) {
  static const std::vector<uint64_t> none;
  if (auto* c = std::get_if<CommandMsg>(&message)) return c->attachments;
  if (auto* r = std::get_if<ReplyMsg>(&message)) return r->attachments;
  if (auto* p = std::get_if<ProgressMsg>(&message)) return p->attachments;
  return none;
}

std::string encode_message(const Message& message) {
  capnp::MallocMessageBuilder builder;
  std::visit(Encoder{builder.initRoot<wire::Message>()}, message);
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

bool decode_message(const void* data, size_t size, const DecodeLimits& limits, Message& out,
                    std::string& error) {
  if (size == 0) {
    error = "empty frame";
    return false;
  }
  if (size > limits.max_bytes) {
    error = fmt::format("frame of {} bytes exceeds the {} byte limit", size, limits.max_bytes);
    return false;
  }
  if (size % sizeof(capnp::word) != 0) {
    error = fmt::format("frame of {} bytes is not a whole number of 8-byte words", size);
    return false;
  }
  // ZeroMQ buffers carry no alignment promise; capnp reads 8-byte words, so copy.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
  std::memcpy(words.begin(), data, size);
  capnp::ReaderOptions options;
  options.traversalLimitInWords = size / sizeof(capnp::word) * 2 + 64;  // no amplification attacks
  options.nestingLimit = limits.nesting_limit;
  try {
    capnp::FlatArrayMessageReader reader(words, options);
    // A frame with bytes after the message is not a message either.
    if (reader.getEnd() != words.end()) {
      error = "trailing bytes after the message";
      return false;
    }
    out = read_message(reader.getRoot<wire::Message>());
    return true;
  } catch (const kj::Exception& e) {
    error = fmt::format("malformed message: {}", e.getDescription().cStr());
  } catch (const std::exception& e) {
    error = fmt::format("malformed message: {}", e.what());
  }
  return false;
}

}  // namespace tandem
