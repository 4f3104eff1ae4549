#include "weight_sync/broadcast_protocol.h"

#include "core/error.h"
#include "weight_sync/buckets.h"
#include "core/checksum.h"
#include "core/trace.h"
#include "weight_sync/layout.h"

#include <nlohmann/json.hpp>

#include <cstring>

namespace tandem {

std::vector<char> status_pack(const std::string& mine) {
  std::vector<char> packed(kStatusBytes, '\0');
  std::memcpy(packed.data(), mine.data(), std::min(mine.size(), kStatusBytes - 1));
  return packed;
}

std::vector<std::string> status_unpack(const std::vector<char>& all, int size) {
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.emplace_back(all.data() + static_cast<size_t>(r) * kStatusBytes);
  return out;
}

namespace {

// A header larger than this is a broken stream, not a model (1M tensors of ~100 bytes).
constexpr uint64_t kMaxHeaderBytes = uint64_t{128} << 20;
// The key of the header a sender sends instead of a layout when it cannot publish.
constexpr const char* kAbandoned = "abandoned";

// Owns the lazily connected group and the rule that a failed group is never used again.
class GroupHolder {
 public:
  GroupHolder(ConnectGroup connect, std::string where) : connect_(std::move(connect)), where_(std::move(where)) {}

  BroadcastGroup& group() {
    if (!failure_.empty()) {
      throw Error(fmt::format("{}: unusable after an earlier failure ({}); make a new group with a fresh rendezvous",
                              where_, failure_));
    }
    if (!group_) guarded([&] { group_ = connect_(); });
    return *group_;
  }

  // Runs `step`; an exception from it means the group's state is unknown: drop the group.
  template <typename Step>
  void guarded(Step step) {
    try {
      step();
    } catch (const std::exception& e) {
      failure_ = e.what();
      group_.reset();
      throw;
    }
  }

  const std::string& where() const { return where_; }

 private:
  ConnectGroup connect_;
  std::string where_;
  std::unique_ptr<BroadcastGroup> group_;
  std::string failure_;
};

// The messages of ranks other than `self` that are not empty, joined.
std::string others_complaints(const std::vector<std::string>& verdicts, int self) {
  std::string joined;
  for (size_t r = 0; r < verdicts.size(); ++r) {
    if (static_cast<int>(r) == self || verdicts[r].empty()) continue;
    joined += (joined.empty() ? "" : "; ") + verdicts[r];
  }
  return joined;
}

class BroadcastSender : public WeightSender {
 public:
  BroadcastSender(ConnectGroup connect, const WeightSyncOptions& options, const std::string& where)
      : holder_(std::move(connect), where), options_(options) {}

  PublishStats publish(int64_t version, const std::vector<OutgoingTensor>& tensors) override {
    WeightLayout layout;
    try {
      layout = plan_weight_layout(tensors, version, options_.bucket_bytes, holder_.where());
    } catch (const Error& e) {
      try {
        abandon(e.what());  // the receivers are waiting for a header: tell them why none comes
      } catch (const std::exception&) {
        // The group failed too (and says so on the next call); this error is the one to report.
      }
      throw;
    }
    BroadcastGroup& g = holder_.group();
    std::vector<std::string> verdicts;
    holder_.guarded([&] {
      g.stage(layout, tensors);
      std::string header = encode_weight_layout(layout);
      uint64_t length = header.size();
      g.broadcast(&length, sizeof length);
      g.broadcast(header.data(), header.size());
      verdicts = g.allgather("");
    });
    std::string complaints = others_complaints(verdicts, 0);
    if (!complaints.empty()) {
      throw Error(fmt::format("{}: version {} not sent, a receiver rejected its header: {}", holder_.where(), version,
                              complaints));
    }
    holder_.guarded([&] {
      for (size_t b = 0; b < layout.buckets.size(); ++b) {
        trace::Span span("send_bucket", "sync");
        span.set_count(layout.buckets[b].end - layout.buckets[b].begin);
        g.send_bucket(layout, tensors, b, options_.tamper_bucket_for_test);
      }
      verdicts = g.allgather("");
    });
    complaints = others_complaints(verdicts, 0);
    if (!complaints.empty()) {
      throw Error(fmt::format("{}: version {} failed at a receiver: {}", holder_.where(), version, complaints));
    }
    return {layout.total_bytes, static_cast<int64_t>(layout.buckets.size())};
  }

 private:
  void abandon(const std::string& why) {
    BroadcastGroup& g = holder_.group();
    holder_.guarded([&] {
      std::string header = nlohmann::json{{kAbandoned, why}}.dump();
      uint64_t length = header.size();
      g.broadcast(&length, sizeof length);
      g.broadcast(header.data(), header.size());
    });
  }

  GroupHolder holder_;
  WeightSyncOptions options_;
};

class BroadcastReceiver : public WeightReceiver {
 public:
  BroadcastReceiver(ConnectGroup connect, const std::string& where) : holder_(std::move(connect), where) {}

  int64_t receive(const std::vector<ExpectedTensor>& expected, const WeightSink& sink) override {
    BroadcastGroup& g = holder_.group();
    const std::string& where = holder_.where();
    WeightLayout layout;
    std::string verdict, abandoned;
    std::vector<std::string> verdicts;
    holder_.guarded([&] {
      uint64_t length = 0;
      g.broadcast(&length, sizeof length);
      if (length == 0 || length > kMaxHeaderBytes) {
        throw Error(fmt::format("{}: header length {} from rank 0 is not plausible", where, length));
      }
      std::string header(length, '\0');
      g.broadcast(header.data(), header.size());
      if (header.rfind(std::string("{\"") + kAbandoned + "\":", 0) == 0) {
        abandoned = nlohmann::json::parse(header).at(kAbandoned).get<std::string>();
        return;  // nothing more of this version comes
      }
      try {
        layout = decode_weight_layout(header, where);
        check_weight_layout(layout, expected, where);
      } catch (const Error& e) {
        verdict = e.what();
      }
      verdicts = g.allgather(verdict);
    });
    if (!abandoned.empty()) throw Error(fmt::format("{}: rank 0 (the sender) abandoned this version: {}", where, abandoned));
    if (!verdict.empty()) throw Error(verdict);
    const std::string complaints = others_complaints(verdicts, g.rank());
    if (!complaints.empty()) {
      throw Error(fmt::format("{}: version {} abandoned, another receiver rejected its header: {}", where,
                              layout.version, complaints));
    }
    std::string failure;
    BucketUnpacker unpacker(layout, sink);
    holder_.guarded([&] {
      for (size_t b = 0; b < layout.buckets.size(); ++b) {
        trace::Span span("receive_bucket", "sync");
        span.set_count(layout.buckets[b].end - layout.buckets[b].begin);
        const uint8_t* data = g.receive_bucket(layout, b);
        if (!failure.empty()) continue;  // keep draining: the sender and other ranks go on
        const LayoutBucket& bucket = layout.buckets[b];
        const uint64_t got = checksum64(data, static_cast<size_t>(bucket.end - bucket.begin));
        if (got != bucket.checksum) {
          failure = fmt::format("{}: {} checksum {} != {}: corrupted", where, describe_bucket(layout, b),
                                checksum_hex(got), checksum_hex(bucket.checksum));
          continue;
        }
        failure = deliver([&] { unpacker.add(b, data); });
      }
      if (failure.empty()) failure = deliver([&] { unpacker.finish(); });
      verdicts = g.allgather(failure);
    });
    if (!failure.empty()) throw Error(failure);
    return layout.version;
  }

 private:
  // Runs the sink; its exception becomes this receiver's failure, reported after draining.
  template <typename Step>
  std::string deliver(Step step) {
    try {
      step();
      return "";
    } catch (const std::exception& e) {
      return fmt::format("{}: the sink failed: {}", holder_.where(), e.what());
    }
  }

  GroupHolder holder_;
};

}  // namespace

std::unique_ptr<WeightSender> make_broadcast_sender(ConnectGroup connect, const WeightSyncOptions& options,
                                                    const std::string& where) {
  return std::make_unique<BroadcastSender>(std::move(connect), options, where);
}

std::unique_ptr<WeightReceiver> make_broadcast_receiver(ConnectGroup connect, const WeightSyncOptions& options,
                                                        const std::string& where) {
  return std::make_unique<BroadcastReceiver>(std::move(connect), where);
}

}  // namespace tandem
