#include "weight_sync/cuda_util.h"

#include "core/error.h"
#include "core/checksum.h"
#include "weight_sync/cuda_device.h"

#include <thread>

namespace tandem {

void cuda_check(cudaError_t status, const char* call, const std::string& where) {
  if (status == cudaSuccess) return;
  throw Error(fmt::format("{}: {}: {}: {}", where, call, cudaGetErrorName(status), cudaGetErrorString(status)));
}

void cuda_require_device(int device, const std::string& where) {
  const std::string why = cuda_unavailable_reason(device);
  if (!why.empty()) throw Error(fmt::format("{}: {}", where, why));
  TANDEM_CUDA_CHECK(where, cudaSetDevice(device));
}

void cuda_copy_default(void* dst, const void* src, size_t bytes) {
  TANDEM_CUDA_CHECK("weight_sync copy", cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);  // no throwing from a destructor; a failed free leaks at worst
}

bool DeviceBuffer::reserve(size_t bytes, const std::string& where) {
  if (bytes <= capacity_ && data_) return false;
  if (data_) TANDEM_CUDA_CHECK(where, cudaFree(data_));
  data_ = nullptr;
  capacity_ = 0;
  void* p = nullptr;
  TANDEM_CUDA_CHECK(where, cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  data_ = static_cast<uint8_t*>(p);
  capacity_ = bytes;
  return true;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}

void PinnedBuffer::reserve(size_t bytes, const std::string& where) {
  if (bytes <= capacity_ && data_) return;
  if (data_) TANDEM_CUDA_CHECK(where, cudaFreeHost(data_));
  data_ = nullptr;
  capacity_ = 0;
  void* p = nullptr;
  TANDEM_CUDA_CHECK(where, cudaMallocHost(&p, std::max<size_t>(bytes, 1)));
  data_ = static_cast<uint8_t*>(p);
  capacity_ = bytes;
}

CudaStream::CudaStream(const std::string& where) {
  TANDEM_CUDA_CHECK(where, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaStream::wait(double timeout_s, const std::string& what, const std::string& where,
                      const std::function<void()>& also) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    const cudaError_t status = cudaStreamQuery(stream_);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) cuda_check(status, "cudaStreamQuery", where + ": " + what);
    if (also) also();
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(fmt::format("{}: {} did not finish within {} s (is every rank running?)", where, what, timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool DeviceStream::stage(WeightLayout& layout, const std::vector<OutgoingTensor>& tensors, const CudaStream& stream,
                         double timeout_s) {
  const bool moved = device_.reserve(static_cast<size_t>(layout.total_bytes), where_);
  TANDEM_CUDA_CHECK(where_, cudaMemsetAsync(device_.data(), 0, static_cast<size_t>(layout.total_bytes), stream.get()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const LayoutTensor& t = layout.tensors[i];
    TANDEM_CUDA_CHECK(where_, cudaMemcpyAsync(device_.data() + t.offset, tensors[i].data, static_cast<size_t>(t.bytes),
                                              cudaMemcpyDefault, stream.get()));
  }
  int64_t largest = 0;
  for (const LayoutBucket& b : layout.buckets) largest = std::max(largest, b.end - b.begin);
  host_bucket_.reserve(static_cast<size_t>(largest), where_);
  for (LayoutBucket& b : layout.buckets) {
    const auto bytes = static_cast<size_t>(b.end - b.begin);
    TANDEM_CUDA_CHECK(where_, cudaMemcpyAsync(host_bucket_.data(), device_.data() + b.begin, bytes,
                                              cudaMemcpyDeviceToHost, stream.get()));
    stream.wait(timeout_s, "copying the weights to the GPU", where_);
    b.checksum = checksum64(host_bucket_.data(), bytes);
  }
  return moved;
}

void DeviceStream::tamper(const WeightLayout& layout, size_t bucket, const BucketTamper& tamper) {
  const LayoutBucket& b = layout.buckets[bucket];
  const auto bytes = static_cast<size_t>(b.end - b.begin);
  TANDEM_CUDA_CHECK(where_, cudaMemcpy(host_bucket_.data(), device_.data() + b.begin, bytes, cudaMemcpyDeviceToHost));
  tamper(bucket, host_bucket_.data(), bytes);
  TANDEM_CUDA_CHECK(where_, cudaMemcpy(device_.data() + b.begin, host_bucket_.data(), bytes, cudaMemcpyHostToDevice));
}

}  // namespace tandem
