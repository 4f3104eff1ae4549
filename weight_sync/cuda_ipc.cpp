#include "weight_sync/cuda_ipc.h"

#include "core/error.h"
#include "weight_sync/buckets.h"
#include "core/checksum.h"
#include "weight_sync/cuda_util.h"
#include "weight_sync/layout.h"
#include "weight_sync/shm_segment.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

namespace tandem {

namespace {

std::string to_hex(const void* data, size_t bytes) {
  std::string hex;
  for (size_t i = 0; i < bytes; ++i) hex += fmt::format("{:02x}", static_cast<const uint8_t*>(data)[i]);
  return hex;
}

template <typename Handle>
Handle handle_from_hex(const std::string& hex, const std::string& where) {
  Handle handle{};
  if (hex.size() != 2 * sizeof handle || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw Error(fmt::format("{}: malformed IPC handle in the mailbox", where));
  }
  auto* bytes = reinterpret_cast<uint8_t*>(&handle);
  for (size_t i = 0; i < sizeof handle; ++i) bytes[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return handle;
}

std::string pci_bus_id(int device, const std::string& where) {
  char id[32] = {};
  TANDEM_CUDA_CHECK(where, cudaDeviceGetPCIBusId(id, sizeof id, device));
  return id;
}

class CudaIpcSender : public WeightSender {
 public:
  explicit CudaIpcSender(const WeightSyncOptions& options)
      : options_(options), where_("weight_sync cuda_ipc " + options.address), device_(where_) {
    cuda_require_device(options_.cuda_device, where_);
    stream_ = std::make_unique<CudaStream>(where_);
    TANDEM_CUDA_CHECK(where_, cudaEventCreateWithFlags(&event_, cudaEventDisableTiming | cudaEventInterprocess));
    TANDEM_CUDA_CHECK(where_, cudaIpcGetEventHandle(&event_handle_, event_));
  }

  ~CudaIpcSender() override {
    shm_segment_remove(options_.address);  // its handles die with this sender
    if (event_) cudaEventDestroy(event_);
  }

  PublishStats publish(int64_t version, const std::vector<OutgoingTensor>& tensors) override {
    WeightLayout layout = plan_weight_layout(tensors, version, options_.bucket_bytes, where_);
    TANDEM_CUDA_CHECK(where_, cudaSetDevice(options_.cuda_device));
    if (device_.stage(layout, tensors, *stream_, options_.timeout_s) || !have_mem_handle_) {
      TANDEM_CUDA_CHECK(where_, cudaIpcGetMemHandle(&mem_handle_, device_.data()));
      have_mem_handle_ = true;
    }
    if (options_.tamper_bucket_for_test) {
      for (size_t b = 0; b < layout.buckets.size(); ++b) device_.tamper(layout, b, options_.tamper_bucket_for_test);
    }
    TANDEM_CUDA_CHECK(where_, cudaEventRecord(event_, stream_->get()));
    const std::string header = nlohmann::json{{"layout", encode_weight_layout(layout)},
                                              {"mem_handle", to_hex(&mem_handle_, sizeof mem_handle_)},
                                              {"event_handle", to_hex(&event_handle_, sizeof event_handle_)},
                                              {"pci_bus_id", pci_bus_id(options_.cuda_device, where_)},
                                              {"sender_pid", ::getpid()}}
                                   .dump();
    ShmSegment mailbox = ShmSegment::create(options_.address, header.size(), 0, where_);
    mailbox.publish(header);
    return {layout.total_bytes, static_cast<int64_t>(layout.buckets.size())};
  }

 private:
  WeightSyncOptions options_;
  std::string where_;
  DeviceStream device_;
  std::unique_ptr<CudaStream> stream_;
  cudaEvent_t event_ = nullptr;
  cudaIpcEventHandle_t event_handle_{};
  cudaIpcMemHandle_t mem_handle_{};
  bool have_mem_handle_ = false;
};

class CudaIpcReceiver : public WeightReceiver {
 public:
  explicit CudaIpcReceiver(const WeightSyncOptions& options)
      : options_(options), where_("weight_sync cuda_ipc " + options.address) {
    cuda_require_device(options_.cuda_device, where_);
    stream_ = std::make_unique<CudaStream>(where_);
  }

  ~CudaIpcReceiver() override {
    if (mapped_) cudaIpcCloseMemHandle(mapped_);
    if (event_) cudaEventDestroy(event_);
  }

  int64_t receive(const std::vector<ExpectedTensor>& expected, const WeightSink& sink) override {
    const ShmSegment mailbox = ShmSegment::open_published(options_.address, options_.timeout_s, where_);
    nlohmann::json header;
    std::string layout_text, mem_hex, event_hex, bus_id;
    try {
      header = nlohmann::json::parse(mailbox.header(where_));
      layout_text = header.at("layout").get<std::string>();
      mem_hex = header.at("mem_handle").get<std::string>();
      event_hex = header.at("event_handle").get<std::string>();
      bus_id = header.at("pci_bus_id").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("{}: malformed mailbox: {}", where_, e.what()));
    }
    const WeightLayout layout = decode_weight_layout(layout_text, where_);
    check_weight_layout(layout, expected, where_);
    TANDEM_CUDA_CHECK(where_, cudaSetDevice(options_.cuda_device));
    const std::string mine = pci_bus_id(options_.cuda_device, where_);
    if (mine != bus_id) {
      throw Error(fmt::format("{}: the sender's weights are on GPU {}, this receiver uses GPU {} ({}); cuda_ipc needs "
                              "one GPU for both",
                              where_, bus_id, options_.cuda_device, mine));
    }
    open_handles(mem_hex, event_hex);
    TANDEM_CUDA_CHECK(where_, cudaStreamWaitEvent(stream_->get(), event_, 0));
    int64_t largest = 0;
    for (const LayoutBucket& b : layout.buckets) largest = std::max(largest, b.end - b.begin);
    host_bucket_.reserve(static_cast<size_t>(largest), where_);
    BucketUnpacker unpacker(layout, sink);
    for (size_t b = 0; b < layout.buckets.size(); ++b) {
      const LayoutBucket& bucket = layout.buckets[b];
      const auto bytes = static_cast<size_t>(bucket.end - bucket.begin);
      TANDEM_CUDA_CHECK(where_, cudaMemcpyAsync(host_bucket_.data(), static_cast<uint8_t*>(mapped_) + bucket.begin,
                                                bytes, cudaMemcpyDeviceToHost, stream_->get()));
      stream_->wait(options_.timeout_s, "copying " + describe_bucket(layout, b), where_);
      const uint64_t got = checksum64(host_bucket_.data(), bytes);
      if (got != bucket.checksum) {
        throw Error(fmt::format("{}: {} checksum {} != {}: corrupted", where_, describe_bucket(layout, b),
                                checksum_hex(got), checksum_hex(bucket.checksum)));
      }
      unpacker.add(b, host_bucket_.data());
    }
    unpacker.finish();
    return layout.version;
  }

 private:
  // Opens the sender's buffer and event, keeping them across versions while they stay the same.
  void open_handles(const std::string& mem_hex, const std::string& event_hex) {
    if (mem_hex != mem_hex_) {
      if (mapped_) TANDEM_CUDA_CHECK(where_, cudaIpcCloseMemHandle(mapped_));
      mapped_ = nullptr;
      mem_hex_.clear();
      const auto handle = handle_from_hex<cudaIpcMemHandle_t>(mem_hex, where_);
      TANDEM_CUDA_CHECK(where_, cudaIpcOpenMemHandle(&mapped_, handle, cudaIpcMemLazyEnablePeerAccess));
      mem_hex_ = mem_hex;
    }
    if (event_hex != event_hex_) {
      if (event_) TANDEM_CUDA_CHECK(where_, cudaEventDestroy(event_));
      event_ = nullptr;
      event_hex_.clear();
      const auto handle = handle_from_hex<cudaIpcEventHandle_t>(event_hex, where_);
      TANDEM_CUDA_CHECK(where_, cudaIpcOpenEventHandle(&event_, handle));
      event_hex_ = event_hex;
    }
  }

  WeightSyncOptions options_;
  std::string where_;
  std::unique_ptr<CudaStream> stream_;
  PinnedBuffer host_bucket_;
  void* mapped_ = nullptr;
  std::string mem_hex_;
  cudaEvent_t event_ = nullptr;
  std::string event_hex_;
};

}  // namespace

std::unique_ptr<WeightSender> make_cuda_ipc_sender(const WeightSyncOptions& options) {
  return std::make_unique<CudaIpcSender>(options);
}

std::unique_ptr<WeightReceiver> make_cuda_ipc_receiver(const WeightSyncOptions& options) {
  return std::make_unique<CudaIpcReceiver>(options);
}

}  // namespace tandem
