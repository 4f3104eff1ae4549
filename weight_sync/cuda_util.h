// CUDA helpers of the GPU weight transports: a checking wrapper for every runtime call,
// RAII for device and pinned buffers, streams and events, a bounded wait on a stream,
// and the sender's device copy of the stream. Compiled only with CUDA; includes
// cuda_runtime.h, so only weight_sync's GPU .cpp files include it.
#pragma once

#include "weight_sync/layout.h"
#include "weight_sync/transport.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace tandem {

// Throws Error "<where>: <call>: <cudaErrorName>: <description>" unless `status` is cudaSuccess.
void cuda_check(cudaError_t status, const char* call, const std::string& where);
#define TANDEM_CUDA_CHECK(where, call) ::tandem::cuda_check((call), #call, (where))

// Throws "<where>: no GPU: ..." (or "built without CUDA") unless GPU `device` is usable; selects it.
void cuda_require_device(int device, const std::string& where);

// cudaMemcpyDefault: host or device on either side (unified addressing). A CopyBytes for pack_bucket.
void cuda_copy_default(void* dst, const void* src, size_t bytes);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Grows to at least `bytes` (contents lost when it grows); true when it was reallocated.
  bool reserve(size_t bytes, const std::string& where);
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void reserve(size_t bytes, const std::string& where);
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

class CudaStream {
 public:
  explicit CudaStream(const std::string& where);
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }
  // Waits for the work queued so far, polling up to `timeout_s`; `also` (may be empty) is
  // asked on each poll for an asynchronous error of its own (NCCL's). Throws Error naming
  // `what` and the limit when it does not finish.
  void wait(double timeout_s, const std::string& what, const std::string& where,
            const std::function<void()>& also = {}) const;

 private:
  cudaStream_t stream_ = nullptr;
};

// The sender's copy of the stream in device memory (layout.h), and each bucket's checksum
// taken from that copy (through a pinned host bucket), so the checksum covers what
// receivers will read.
class DeviceStream {
 public:
  explicit DeviceStream(std::string where) : where_(std::move(where)) {}
  // Copies `tensors` (host or device memory) in and fills layout's checksums. True when
  // the device buffer was reallocated (an exported IPC handle changes).
  bool stage(WeightLayout& layout, const std::vector<OutgoingTensor>& tensors, const CudaStream& stream,
             double timeout_s);
  // Tests only: lets `tamper` change bucket `bucket` after its checksum was taken.
  void tamper(const WeightLayout& layout, size_t bucket, const BucketTamper& tamper);
  uint8_t* data() const { return device_.data(); }

 private:
  std::string where_;
  DeviceBuffer device_;
  PinnedBuffer host_bucket_;
};

}  // namespace tandem
