#include "weight_sync/collective.h"

#include "core/error.h"
#include "weight_sync/broadcast_protocol.h"
#include "weight_sync/buckets.h"
#include "weight_sync/directory_store.h"

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <cstring>

namespace tandem {

namespace {

void copy_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

class GlooGroup : public BroadcastGroup {
 public:
  GlooGroup(const WeightSyncOptions& options, std::string where)
      : where_(std::move(where)),
        timeout_(std::max<int64_t>(1, static_cast<int64_t>(options.timeout_s * 1000))),
        timeout_s_(options.timeout_s) {
    DirectoryStore store(options.address, timeout_, where_);
    try {
      connect(options, store);
    } catch (...) {
      store.remove_own_keys();  // a failed group must not leave a stale address behind
      throw;
    }
    store.remove_own_keys();
  }

  ~GlooGroup() override {
    context_.reset();  // before the device: its pairs use the device's event loop
    device_.reset();
  }

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  void broadcast(void* data, size_t bytes) override {
    if (bytes == 0) return;  // every rank knows the size: all skip together
    gloo_call(rank() == 0 ? "broadcast to the receivers" : "broadcast from rank 0 (the sender)", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(data), bytes);
      opts.setRoot(0);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  std::vector<std::string> allgather(const std::string& mine) override {
    std::vector<char> in = status_pack(mine), out(kStatusBytes * static_cast<size_t>(size()));
    gloo_call("exchanging verdicts", [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(in.data(), in.size());
      opts.setOutput(out.data(), out.size());
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
    return status_unpack(out, size());
  }

  void stage(WeightLayout& layout, const std::vector<OutgoingTensor>& tensors) override {
    for (size_t b = 0; b < layout.buckets.size(); ++b) {
      layout.buckets[b].checksum = bucket_checksum_from_tensors(layout, tensors, b);
    }
  }

  void send_bucket(const WeightLayout& layout, const std::vector<OutgoingTensor>& tensors, size_t bucket,
                   const BucketTamper& tamper) override {
    const LayoutBucket& b = layout.buckets[bucket];
    const auto bytes = static_cast<size_t>(b.end - b.begin);
    if (staging_.size() < bytes) staging_.resize(bytes);
    pack_bucket(layout, tensors, bucket, staging_.data(), copy_host);
    if (tamper) tamper(bucket, staging_.data(), bytes);
    broadcast(staging_.data(), bytes);
  }

  const uint8_t* receive_bucket(const WeightLayout& layout, size_t bucket) override {
    const LayoutBucket& b = layout.buckets[bucket];
    const auto bytes = static_cast<size_t>(b.end - b.begin);
    if (staging_.size() < bytes) staging_.resize(bytes);
    broadcast(staging_.data(), bytes);
    return staging_.data();
  }

 private:
  void connect(const WeightSyncOptions& options, DirectoryStore& store) {
    gloo_call("connecting", [&] {
      gloo::transport::tcp::attr attr;
      attr.hostname = options.host;
      device_ = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
      context_->setTimeout(timeout_);
      context_->connectFullMesh(store, device_);
      // Everyone has read everyone's address once all are here: the keys can go.
      gloo::BarrierOptions barrier(context_);
      barrier.setTag(next_tag());
      barrier.setTimeout(timeout_);
      gloo::barrier(barrier);
    });
  }

  // Gloo reports failures as its own exceptions; ours name the rank, the step and the limit.
  template <typename Call>
  void gloo_call(const char* what, Call call) {
    try {
      call();
    } catch (const gloo::IoException& e) {
      throw Error(fmt::format("{}: {} failed or did not complete within {} s (is every rank running?): gloo: {}", where_,
                              what, timeout_s_, e.what()));
    } catch (const gloo::Exception& e) {
      throw Error(fmt::format("{}: {} failed: gloo: {}", where_, what, e.what()));
    }
  }

  uint32_t next_tag() { return tag_++; }

  std::string where_;
  std::chrono::milliseconds timeout_;
  double timeout_s_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::vector<uint8_t> staging_;  // one bucket
  uint32_t tag_ = 0;
};

std::string collective_where(const WeightSyncOptions& options) {
  return fmt::format("weight_sync collective rank {} of {} (rendezvous {})", options.rank, options.world_size,
                     options.address);
}

ConnectGroup gloo_connector(const WeightSyncOptions& options) {
  return [options]() -> std::unique_ptr<BroadcastGroup> {
    return std::make_unique<GlooGroup>(options, collective_where(options));
  };
}

}  // namespace

std::unique_ptr<WeightSender> make_collective_sender(const WeightSyncOptions& options) {
  return make_broadcast_sender(gloo_connector(options), options, collective_where(options));
}

std::unique_ptr<WeightReceiver> make_collective_receiver(const WeightSyncOptions& options) {
  return make_broadcast_receiver(gloo_connector(options), options, collective_where(options));
}

void abandon_collective_rendezvous(const std::string& address) { DirectoryStore::abandon(address); }

}  // namespace tandem
