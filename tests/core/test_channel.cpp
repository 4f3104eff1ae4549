// The ZeroMQ channel over loopback: valid traffic flows, hostile frames are dropped
// and counted, and the channel keeps working after each.
#include "core/channel.h"

#include <doctest/doctest.h>

#include <chrono>
#include <random>

using namespace tandem;

namespace {

struct Fixture {
  zmq::context_t context{1};
  Channel router{context, Channel::Kind::router, ChannelOptions{1u << 20, std::nullopt}};
  std::string address = router.bind("tcp://127.0.0.1:*");

  // A raw DEALER, to send whatever bytes a broken or hostile peer might.
  zmq::socket_t raw_dealer() {
    zmq::socket_t s(context, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.connect(address);
    return s;
  }

  // The channel still delivers a valid message after whatever came before.
  void expect_alive(Channel& dealer, uint64_t sequence) {
    REQUIRE(dealer.send(HeartbeatMsg{WorkerId{"rollout", 1}, sequence}));
    auto in = router.receive(5000);
    REQUIRE(in.has_value());
    auto* hb = std::get_if<HeartbeatMsg>(&in->message);
    REQUIRE(hb != nullptr);
    CHECK(hb->sequence == sequence);
  }
};

}  // namespace

TEST_CASE("messages with attachments travel both ways") {
  Fixture f;
  Channel dealer(f.context, Channel::Kind::dealer);
  dealer.connect(f.address);
  std::string big(300000, 'q');
  REQUIRE(dealer.send(CommandMsg{7, "load", "body", {3, big.size()}}, {"abc", big}));
  auto in = f.router.receive(5000);
  REQUIRE(in.has_value());
  auto& cmd = std::get<CommandMsg>(in->message);
  CHECK(cmd.request_id == 7);
  REQUIRE(in->attachments.size() == 2);
  CHECK(in->attachments[1] == big);
  REQUIRE(f.router.send(in->peer, ReplyMsg{7, WorkerId{"controller", 0}, "ok", {}}));
  auto back = dealer.receive(5000);
  REQUIRE(back.has_value());
  CHECK(std::get<ReplyMsg>(back->message).body == "ok");
  CHECK(f.router.rejected_count() == 0);
}

TEST_CASE("malformed frames are dropped, counted and do not stop the channel") {
  Fixture f;
  Channel good(f.context, Channel::Kind::dealer);
  good.connect(f.address);
  f.expect_alive(good, 1);
  zmq::socket_t bad = f.raw_dealer();
  std::mt19937_64 rng(std::random_device{}());

  uint64_t sequence = 2;
  uint64_t before = f.router.rejected_count();
  // The ROUTER fair-queues its peers, so a bad frame may be read after a later good
  // one: wait (bounded) until the rejections have been counted before going on.
  auto await_rejections = [&](uint64_t count) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (f.router.rejected_count() - before < count && std::chrono::steady_clock::now() < deadline) {
      f.router.receive(20);
    }
  };
  uint64_t expected = 0;
  auto send_raw = [&](const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      bad.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    await_rejections(++expected);
    f.expect_alive(good, sequence++);
  };

  send_raw({""});                                  // empty frame
  send_raw({"not capnp"});                         // not a whole word
  send_raw({std::string(64, '\xff')});             // garbage segment table
  std::string valid = encode_message(HeartbeatMsg{WorkerId{"x", 0}, 1});
  send_raw({valid.substr(0, 16)});                 // truncated
  send_raw({valid, "unexpected attachment"});      // attachment not declared
  std::string cmd = encode_message(CommandMsg{1, "load", "", {10}});
  send_raw({cmd});                                 // declared attachment missing
  send_raw({cmd, "short"});                        // attachment of the wrong size
  for (int i = 0; i < 200; ++i) {
    std::string junk(8 * (1 + rng() % 32), '\0');
    for (auto& c : junk) c = static_cast<char>(rng() & 0xff);
    bad.send(zmq::buffer(junk), zmq::send_flags::none);
  }
  await_rejections(expected + 190);  // nearly every junk frame is invalid; a rare one decodes
  f.expect_alive(good, sequence++);
  CHECK(f.router.rejected_count() - before >= 7);
}

TEST_CASE("a frame over the size limit is refused by ZeroMQ, and others go on") {
  Fixture f;
  Channel good(f.context, Channel::Kind::dealer);
  good.connect(f.address);
  f.expect_alive(good, 1);
  zmq::socket_t bad = f.raw_dealer();
  std::string huge((2u << 20) + 8, 'z');  // the router allows 1 MiB
  bad.send(zmq::buffer(huge), zmq::send_flags::none);
  f.expect_alive(good, 2);
  auto in = f.router.receive(200);
  CHECK_FALSE(in.has_value());  // the huge frame never surfaced
}
