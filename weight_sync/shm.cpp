#include "weight_sync/shm.h"
#include "core/trace.h"

#include "core/checksum.h"
#include "core/error.h"
#include "core/process.h"
#include "weight_sync/buckets.h"
#include "weight_sync/layout.h"
#include "weight_sync/shm_segment.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

namespace tandem {

namespace {

// Keeps its segment between versions and rewrites it in place when the next version has
// the same size (the usual case: the same model); see shm_segment.h.
class ShmSender : public WeightSender {
 public:
  explicit ShmSender(WeightSyncOptions options)
      : options_(std::move(options)), where_("weight_sync shm " + options_.address) {}

  PublishStats publish(int64_t version, const std::vector<OutgoingTensor>& tensors) override {
    WeightLayout layout = plan_weight_layout(tensors, version, options_.bucket_bytes, where_);
    // Checksums are hex of fixed width: the header keeps the size it has with zeros.
    const size_t header_bytes = encode_weight_layout(layout).size();
    const auto data_bytes = static_cast<size_t>(layout.total_bytes);
    if (segment_.fits(options_.address, header_bytes, data_bytes)) {
      segment_.begin_write();
    } else {
      segment_ = ShmSegment::create(options_.address, header_bytes, data_bytes, where_);
    }
    for (size_t b = 0; b < layout.buckets.size(); ++b) {
      LayoutBucket& bucket = layout.buckets[b];
      uint8_t* data = segment_.data() + bucket.begin;
      bucket.checksum = pack_bucket_checksummed(layout, tensors, b, data);
      if (options_.tamper_bucket_for_test) {
        options_.tamper_bucket_for_test(b, data, static_cast<size_t>(bucket.end - bucket.begin));
      }
    }
    segment_.publish(encode_weight_layout(layout));
    return {layout.total_bytes, static_cast<int64_t>(layout.buckets.size())};
  }

 private:
  WeightSyncOptions options_;
  std::string where_;
  ShmSegment segment_;
};

// Keeps its mapping while the name refers to the same segment: mapping fresh pages again
// for every version costs more than reading them.
class ShmReceiver : public WeightReceiver {
 public:
  explicit ShmReceiver(WeightSyncOptions options)
      : options_(std::move(options)), where_("weight_sync shm " + options_.address) {}

  int64_t receive(const std::vector<ExpectedTensor>& expected, const WeightSink& sink) override {
    if (!segment_.is_named(options_.address)) {
      segment_ = ShmSegment::open_published(options_.address, options_.timeout_s, where_);
    }
    const uint64_t generation = segment_.stable_generation(options_.timeout_s, where_);
    try {
      const int64_t version = read(expected, sink);
      check_unchanged(generation);
      return version;
    } catch (const Error&) {
      check_unchanged(generation);  // a torn read explains itself better than what it broke
      throw;
    }
  }

 private:
  int64_t read(const std::vector<ExpectedTensor>& expected, const WeightSink& sink) {
    const WeightLayout layout = decode_weight_layout(segment_.header(where_), where_);
    check_weight_layout(layout, expected, where_);
    if (static_cast<size_t>(layout.total_bytes) > segment_.data_size()) {
      throw Error(fmt::format("{}: the header describes {} bytes of data, the segment holds {}", where_,
                              layout.total_bytes, segment_.data_size()));
    }
    for (size_t b = 0; b < layout.buckets.size(); ++b) {
      const LayoutBucket& bucket = layout.buckets[b];
      trace::Span span("check_bucket", "sync");
      span.set_count(bucket.end - bucket.begin);
      const uint64_t got = checksum64(segment_.data() + bucket.begin, static_cast<size_t>(bucket.end - bucket.begin));
      if (got != bucket.checksum) {
        throw Error(fmt::format("{}: {} checksum {} != {}: corrupted", where_, describe_bucket(layout, b),
                                checksum_hex(got), checksum_hex(bucket.checksum)));
      }
    }
    std::map<std::string, const LayoutTensor*> by_name;
    for (const LayoutTensor& t : layout.tensors) by_name[t.name] = &t;
    trace::Span span("load_tensors", "sync");
    for (const ExpectedTensor& e : expected) sink(e, segment_.data() + by_name.at(e.name)->offset);
    return layout.version;
  }

  void check_unchanged(uint64_t generation) const {
    __atomic_thread_fence(__ATOMIC_ACQUIRE);  // the reads above happen before this load
    if (segment_.generation() != generation) {
      throw Error(fmt::format("{}: the sender wrote a new version while this receiver read (generation {} -> {}); "
                              "what it read is discarded",
                              where_, generation, segment_.generation()));
    }
  }

  WeightSyncOptions options_;
  std::string where_;
  ShmSegment segment_;
};

WeightSyncOptions shm_options(const std::string& name, int64_t bucket_bytes, double timeout_s) {
  WeightSyncOptions options;
  options.method = "shm";
  options.address = name;
  options.bucket_bytes = bucket_bytes;
  options.timeout_s = timeout_s;
  return options;
}

}  // namespace

std::unique_ptr<WeightSender> make_shm_sender(const WeightSyncOptions& options) {
  return std::make_unique<ShmSender>(options);
}

std::unique_ptr<WeightReceiver> make_shm_receiver(const WeightSyncOptions& options) {
  return std::make_unique<ShmReceiver>(options);
}

ShmStats publish_weights_shm(const std::string& name, const std::vector<OutgoingTensor>& tensors, int64_t version,
                             int64_t bucket_bytes) {
  return ShmSender(shm_options(name, bucket_bytes, 0)).publish(version, tensors);
}

int64_t receive_weights_shm(const std::string& name, const std::vector<ExpectedTensor>& expected,
                            const TensorSink& sink) {
  for (const ExpectedTensor& e : expected) {
    TANDEM_CHECK(e.dtype == DType::f32, "receive_weights_shm hands float32 only; tensor {} is {} (use the shm transport)",
                 e.name, dtype_name(e.dtype));
  }
  return ShmReceiver(shm_options(name, 1, 0)).receive(expected, [&](const ExpectedTensor& t, const void* data) {
    sink(t, static_cast<const float*>(data));
  });
}

void remove_weights_shm(const std::string& name) { shm_segment_remove(name); }

std::string controller_weights_shm_name(int pid) { return fmt::format("/tandem-{}-weights", pid); }

std::vector<std::string> remove_stale_weights_shm() {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0;
    char tail[16] = {};
    // The run's segment, and its resharding pairs' ("<segment>.s0.d1", reshard.h).
    if (std::sscanf(name.c_str(), "tandem-%d-%15s", &pid, tail) != 2 || std::string(tail).rfind("weights", 0) != 0 ||
        pid <= 0) {
      continue;
    }
    const std::string base = controller_weights_shm_name(pid);
    const bool pair = ("/" + name).rfind(base + ".s", 0) == 0;
    if (("/" + name != base && !pair) || process_alive(pid)) continue;
    remove_weights_shm("/" + name);
    removed.push_back("/" + name);
  }
  return removed;
}

}  // namespace tandem
