#include "weight_sync/nccl_transport.h"

#include "core/error.h"
#include "weight_sync/broadcast_protocol.h"
#include "weight_sync/cuda_util.h"
#include "weight_sync/nccl_id.h"

#include <nccl.h>

#include <cstring>
#include <thread>

namespace tandem {

namespace {

// Polls a non-blocking communicator until its last call is no longer in progress; returns
// its state then, or ncclInProgress at the deadline.
ncclResult_t nccl_settle(ncclComm_t comm, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t asked = ncclCommGetAsyncError(comm, &state);
    if (asked != ncclSuccess) return asked;
    if (state != ncclInProgress || std::chrono::steady_clock::now() >= deadline) return state;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// The communicator: finalized and destroyed when healthy; aborted (which needs no peer and
// unblocks stuck work) once anything failed or finalizing does not settle in 10 s.
struct NcclComm {
  ncclComm_t comm = nullptr;
  bool broken = false;
  NcclComm() = default;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm() {
    if (!comm) return;
    if (!broken && ncclCommFinalize(comm) != ncclInternalError &&
        nccl_settle(comm, std::chrono::steady_clock::now() + std::chrono::seconds(10)) == ncclSuccess) {
      ncclCommDestroy(comm);
      return;
    }
    ncclCommAbort(comm);
  }
};

class NcclGroup : public BroadcastGroup {
 public:
  NcclGroup(const WeightSyncOptions& options, std::string where)
      : options_(options), where_(std::move(where)), staged_(where_) {
    if (options_.nccl_unique_id.size() != kNcclUniqueIdBytes) {
      throw Error(fmt::format("{}: nccl_unique_id must be the {} bytes of nccl_new_unique_id() on rank 0, got {} bytes",
                              where_, kNcclUniqueIdBytes, options_.nccl_unique_id.size()));
    }
    cuda_require_device(options_.cuda_device, where_);
    stream_ = std::make_unique<CudaStream>(where_);
    ncclUniqueId id;
    std::memcpy(&id, options_.nccl_unique_id.data(), sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so that a rank that never joins is a timeout, not a hang
    const ncclResult_t started = ncclCommInitRankConfig(&comm_.comm, options_.world_size, id, options_.rank, &config);
    if (started != ncclInProgress) nccl_check(started, "ncclCommInitRankConfig");
    const ncclResult_t state = nccl_settle(comm_.comm, deadline());
    if (state == ncclInProgress) {
      comm_.broken = true;
      throw Error(fmt::format("{}: the NCCL communicator of {} ranks was not complete within {} s: a rank (the "
                              "sender is rank 0) did not join with this unique id",
                              where_, options_.world_size, options_.timeout_s));
    }
    nccl_check(state, "joining the communicator");
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.world_size; }

  void broadcast(void* data, size_t bytes) override {
    if (bytes == 0) return;
    scratch_.reserve(bytes, where_);
    if (rank() == 0) {
      TANDEM_CUDA_CHECK(where_, cudaMemcpyAsync(scratch_.data(), data, bytes, cudaMemcpyHostToDevice, stream_->get()));
    }
    nccl_check(ncclBroadcast(scratch_.data(), scratch_.data(), bytes, ncclUint8, 0, comm_.comm, stream_->get()),
               "ncclBroadcast");
    if (rank() != 0) {
      TANDEM_CUDA_CHECK(where_, cudaMemcpyAsync(data, scratch_.data(), bytes, cudaMemcpyDeviceToHost, stream_->get()));
    }
    wait(rank() == 0 ? "broadcast to the receivers" : "broadcast from rank 0 (the sender)");
  }

  std::vector<std::string> allgather(const std::string& mine) override {
    const std::vector<char> in = status_pack(mine);
    std::vector<char> out(kStatusBytes * static_cast<size_t>(size()));
    scratch_.reserve(in.size() + out.size(), where_);
    uint8_t* device_in = scratch_.data();
    uint8_t* device_out = scratch_.data() + in.size();
    TANDEM_CUDA_CHECK(where_, cudaMemcpyAsync(device_in, in.data(), in.size(), cudaMemcpyHostToDevice, stream_->get()));
    nccl_check(ncclAllGather(device_in, device_out, in.size(), ncclUint8, comm_.comm, stream_->get()), "ncclAllGather");
    TANDEM_CUDA_CHECK(where_,
                      cudaMemcpyAsync(out.data(), device_out, out.size(), cudaMemcpyDeviceToHost, stream_->get()));
    wait("exchanging verdicts");
    return status_unpack(out, size());
  }

  void stage(WeightLayout& layout, const std::vector<OutgoingTensor>& tensors) override {
    staged_.stage(layout, tensors, *stream_, options_.timeout_s);
  }

  void send_bucket(const WeightLayout& layout, const std::vector<OutgoingTensor>&, size_t bucket,
                   const BucketTamper& tamper) override {
    const LayoutBucket& b = layout.buckets[bucket];
    if (tamper) staged_.tamper(layout, bucket, tamper);
    if (b.end == b.begin) return;
    uint8_t* data = staged_.data() + b.begin;
    nccl_check(ncclBroadcast(data, data, static_cast<size_t>(b.end - b.begin), ncclUint8, 0, comm_.comm, stream_->get()),
               "ncclBroadcast");
    wait("sending " + describe_bucket(layout, bucket));
  }

  const uint8_t* receive_bucket(const WeightLayout& layout, size_t bucket) override {
    const LayoutBucket& b = layout.buckets[bucket];
    const auto bytes = static_cast<size_t>(b.end - b.begin);
    if (bytes == 0) return host_bucket_.data();
    scratch_.reserve(bytes, where_);
    host_bucket_.reserve(bytes, where_);
    nccl_check(ncclBroadcast(scratch_.data(), scratch_.data(), bytes, ncclUint8, 0, comm_.comm, stream_->get()),
               "ncclBroadcast");
    TANDEM_CUDA_CHECK(where_,
                      cudaMemcpyAsync(host_bucket_.data(), scratch_.data(), bytes, cudaMemcpyDeviceToHost, stream_->get()));
    wait("receiving " + describe_bucket(layout, bucket));
    return host_bucket_.data();
  }

 private:
  std::chrono::steady_clock::time_point deadline() const {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(options_.timeout_s));
  }

  // On a non-blocking communicator a call may answer ncclInProgress: it is being queued, and
  // the next NCCL call must wait until that settles.
  void nccl_check(ncclResult_t status, const char* call) {
    if (status == ncclInProgress) status = nccl_settle(comm_.comm, deadline());
    if (status == ncclInProgress) {
      comm_.broken = true;
      throw Error(fmt::format("{}: {} was still being queued after {} s", where_, call, options_.timeout_s));
    }
    if (status == ncclSuccess) return;
    comm_.broken = true;
    throw Error(fmt::format("{}: {}: {} ({})", where_, call, ncclGetErrorString(status),
                            ncclGetLastError(comm_.comm)));
  }

  void wait(const std::string& what) {
    try {
      stream_->wait(options_.timeout_s, what, where_, [&] {
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(comm_.comm, &state);
        if (state != ncclSuccess && state != ncclInProgress) nccl_check(state, what.c_str());
      });
    } catch (const Error&) {
      comm_.broken = true;
      throw;
    }
  }

  WeightSyncOptions options_;
  std::string where_;
  std::unique_ptr<CudaStream> stream_;
  DeviceStream staged_;       // rank 0: the whole stream
  DeviceBuffer scratch_;      // small broadcasts; a receiver's bucket
  PinnedBuffer host_bucket_;  // a receiver's bucket, on the host
  NcclComm comm_;             // last: ended first, before the buffers its work may use
};

std::string nccl_where(const WeightSyncOptions& options) {
  return fmt::format("weight_sync nccl rank {} of {}{}", options.rank, options.world_size,
                     options.address.empty() ? "" : " (" + options.address + ")");
}

ConnectGroup nccl_connector(const WeightSyncOptions& options) {
  return [options]() -> std::unique_ptr<BroadcastGroup> {
    return std::make_unique<NcclGroup>(options, nccl_where(options));
  };
}

}  // namespace

std::unique_ptr<WeightSender> make_nccl_sender(const WeightSyncOptions& options) {
  cuda_require_device(options.cuda_device, nccl_where(options));  // fail at creation, not first use
  return make_broadcast_sender(nccl_connector(options), options, nccl_where(options));
}

std::unique_ptr<WeightReceiver> make_nccl_receiver(const WeightSyncOptions& options) {
  cuda_require_device(options.cuda_device, nccl_where(options));
  return make_broadcast_receiver(nccl_connector(options), options, nccl_where(options));
}

}  // namespace tandem
