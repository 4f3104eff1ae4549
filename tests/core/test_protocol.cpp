// Cap'n Proto messages: round trips of every kind with random contents, and hostile
// bytes (random, truncated, bit-flipped, misaligned, oversized, unknown kinds) that
// must come back as errors, never crashes.
#include "core/protocol.h"

#include <doctest/doctest.h>

#include <cstring>
#include <random>

using namespace tandem;

namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

std::string random_bytes(size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng()() & 0xff);
  return s;
}

std::string random_text(size_t n) {
  std::string s(n, 'a');
  for (auto& c : s) c = static_cast<char>(' ' + rng()() % 95);
  return s;
}

WorkerId random_worker() { return {random_text(1 + rng()() % 12), static_cast<uint32_t>(rng()())}; }

std::vector<Message> random_messages() {
  std::vector<uint64_t> sizes(rng()() % 4);
  for (auto& s : sizes) s = rng()();
  return {
      RegisterMsg{random_worker(), static_cast<uint32_t>(rng()()), random_text(rng()() % 64), static_cast<uint32_t>(rng()()),
                  random_text(rng()() % 40)},
      HeartbeatMsg{random_worker(), rng()()},
      CommandMsg{rng()(), random_text(1 + rng()() % 20), random_bytes(rng()() % 5000), sizes},
      ReplyMsg{rng()(), random_worker(), random_bytes(rng()() % 5000), sizes},
      ErrorReplyMsg{rng()(), random_worker(), random_text(rng()() % 300)},
      ShutdownMsg{random_text(rng()() % 50)},
      ProgressMsg{rng()(), random_worker(), random_bytes(rng()() % 5000), sizes},
  };
}

bool same(const WorkerId& a, const WorkerId& b) { return a.role == b.role && a.rank == b.rank; }

bool same(const Message& a, const Message& b) {
  if (a.index() != b.index()) return false;
  if (auto* x = std::get_if<RegisterMsg>(&a)) {
    auto& y = std::get<RegisterMsg>(b);
    return same(x->worker, y.worker) && x->pid == y.pid && x->hostname == y.hostname &&
           x->protocol_version == y.protocol_version && x->address == y.address;
  }
  if (auto* x = std::get_if<HeartbeatMsg>(&a)) {
    auto& y = std::get<HeartbeatMsg>(b);
    return same(x->worker, y.worker) && x->sequence == y.sequence;
  }
  if (auto* x = std::get_if<CommandMsg>(&a)) {
    auto& y = std::get<CommandMsg>(b);
    return x->request_id == y.request_id && x->name == y.name && x->body == y.body && x->attachments == y.attachments;
  }
  if (auto* x = std::get_if<ReplyMsg>(&a)) {
    auto& y = std::get<ReplyMsg>(b);
    return x->request_id == y.request_id && same(x->worker, y.worker) && x->body == y.body &&
           x->attachments == y.attachments;
  }
  if (auto* x = std::get_if<ErrorReplyMsg>(&a)) {
    auto& y = std::get<ErrorReplyMsg>(b);
    return x->request_id == y.request_id && same(x->worker, y.worker) && x->message == y.message;
  }
  if (auto* x = std::get_if<ProgressMsg>(&a)) {
    auto& y = std::get<ProgressMsg>(b);
    return x->request_id == y.request_id && same(x->worker, y.worker) && x->body == y.body &&
           x->attachments == y.attachments;
  }
  return std::get<ShutdownMsg>(a).reason == std::get<ShutdownMsg>(b).reason;
}

bool decodes(const std::string& bytes, std::string* error = nullptr) {
  Message out;
  std::string e;
  bool ok = decode_message(bytes.data(), bytes.size(), DecodeLimits{}, out, e);
  if (!ok) CHECK_FALSE(e.empty());
  if (error) *error = e;
  return ok;
}

}  // namespace

TEST_CASE("every message kind round-trips with random contents") {
  for (int round = 0; round < 200; ++round) {
    for (const Message& m : random_messages()) {
      std::string bytes = encode_message(m);
      Message back;
      std::string error;
      REQUIRE_MESSAGE(decode_message(bytes.data(), bytes.size(), DecodeLimits{}, back, error), error);
      CHECK(std::string(message_kind(back)) == message_kind(m));
      CHECK(same(m, back));
    }
  }
}

TEST_CASE("random bytes never crash the decoder") {
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    size_t words = rng()() % 64;
    if (decodes(random_bytes(words * 8))) ++accepted;
  }
  // Random segment tables almost never describe a valid message; those few that do
  // decode to some message, which is fine: the decoder only promises not to crash.
  CHECK(accepted < 200);
}

TEST_CASE("truncated, extended and bit-flipped messages are handled") {
  for (const Message& m : random_messages()) {
    std::string bytes = encode_message(m);
    for (size_t cut = 0; cut < bytes.size(); cut += 8) CHECK_FALSE(decodes(bytes.substr(0, cut)));
    std::string error;
    CHECK_FALSE(decodes(bytes + std::string(8, '\0'), &error));
    CHECK(error == "trailing bytes after the message");
    CHECK_FALSE(decodes(bytes.substr(0, bytes.size() - 3), &error));
    CHECK(error.find("not a whole number of 8-byte words") != std::string::npos);
    for (int flip = 0; flip < 300; ++flip) {
      std::string damaged = bytes;
      size_t bit = rng()() % (damaged.size() * 8);
      damaged[bit / 8] = static_cast<char>(damaged[bit / 8] ^ (1 << (bit % 8)));
      decodes(damaged);  // either outcome is fine; a crash is not
    }
  }
}

TEST_CASE("oversized and empty frames are rejected before parsing") {
  Message m = CommandMsg{1, "ping", std::string(4096, 'x'), {}};
  std::string bytes = encode_message(m);
  DecodeLimits limits;
  limits.max_bytes = 1024;
  Message out;
  std::string error;
  CHECK_FALSE(decode_message(bytes.data(), bytes.size(), limits, out, error));
  CHECK(error.find("exceeds the 1024 byte limit") != std::string::npos);
  CHECK_FALSE(decode_message("", 0, DecodeLimits{}, out, error));
  CHECK(error == "empty frame");
}

TEST_CASE("an unknown message kind from a newer peer is an error") {
  std::string bytes = encode_message(ShutdownMsg{"bye"});
  // Layout: segment table (8 bytes), root pointer (8 bytes), then Message's data
  // section whose first 16 bits are the union discriminant.
  uint16_t discriminant = 99;
  std::memcpy(bytes.data() + 16, &discriminant, sizeof discriminant);
  std::string error;
  CHECK_FALSE(decodes(bytes, &error));
  CHECK(error.find("unknown message kind 99") != std::string::npos);
}

TEST_CASE("a pointer claiming far more data than the frame holds is rejected") {
  // A list pointer that claims 2^29-1 elements in a one-word segment.
  std::string bytes(24, '\0');
  uint32_t segment_count_minus_one = 0, segment_words = 2;
  std::memcpy(bytes.data(), &segment_count_minus_one, 4);
  std::memcpy(bytes.data() + 4, &segment_words, 4);
  uint64_t list_pointer = 1 | (uint64_t{7} << 32) | (uint64_t{0x1fffffff} << 35);
  std::memcpy(bytes.data() + 8, &list_pointer, 8);
  CHECK_FALSE(decodes(bytes));
}
