// Device-side helpers of the GPU kernel tests (test_kernels*.cpp; CUDA builds only):
// RAII device buffers, a stream, and the two storage types under test with their
// tolerances against the float64 references.
#pragma once

#include "core/half.h"
#include "kernels/kernel_types.h"
#include "tests/support/kernel_checks.h"

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <random>
#include <vector>

namespace tandem::testing {

#define TANDEM_TEST_CUDA(call)                                                                \
  do {                                                                                        \
    const cudaError_t status_ = (call);                                                       \
    REQUIRE_MESSAGE(status_ == cudaSuccess, #call << ": " << cudaGetErrorString(status_));   \
  } while (0)

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    TANDEM_TEST_CUDA(cudaMalloc(&data_, std::max<size_t>(count, 1) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), count_(other.count_) { other.data_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }

  T* get() const { return static_cast<T*>(data_); }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == count_);
    TANDEM_TEST_CUDA(cudaMemcpy(data_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    TANDEM_TEST_CUDA(cudaDeviceSynchronize());
    std::vector<T> host(count_);
    TANDEM_TEST_CUDA(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // All bytes 0xFF: NaN as float and as bf16, -1 as integers. An output element that a
  // kernel fails to write then fails the isfinite checks.
  void poison() { TANDEM_TEST_CUDA(cudaMemset(data_, 0xFF, std::max<size_t>(count_, 1) * sizeof(T))); }

 private:
  void* data_ = nullptr;
  size_t count_;
};

class TestStream {
 public:
  TestStream() { TANDEM_TEST_CUDA(cudaStreamCreate(&stream_)); }
  ~TestStream() { cudaStreamDestroy(stream_); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void sync() const { TANDEM_TEST_CUDA(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

// fp32 storage: only fp32 arithmetic differs from the reference.
struct Fp32 {
  using Device = float;
  using Host = float;
  static constexpr const char* kName = "fp32";
  static Host encode(double x) { return static_cast<float>(x); }
  static double decode(Host h) { return h; }
  static constexpr Tolerance kElementwise{1e-5, 1e-5};
  // Scores summed over up to 256 products and softmax over thousands of keys in fp32.
  static constexpr Tolerance kAttention{2e-5, 1e-4};
};

// bf16 storage: inputs are bf16 values (exact in double); each output is rounded once to
// bf16 (relative error <= 2^-9); rtol 8e-3 leaves 4x margin, atol covers fp32 arithmetic
// on outputs near zero.
struct Bf16 {
  using Device = kernels::bf16;
  using Host = uint16_t;
  static constexpr const char* kName = "bf16";
  static Host encode(double x) { return float_to_bf16(static_cast<float>(x)); }
  static double decode(Host h) { return bf16_to_float(h); }
  static constexpr Tolerance kElementwise{1e-4, 8e-3};
  static constexpr Tolerance kAttention{2e-4, 8e-3};
};

// A tensor in storage type S on the device, with the exact values the kernel reads.
template <typename S>
struct DeviceTensor {
  std::vector<double> values;
  DeviceBuffer<typename S::Host> buffer;

  explicit DeviceTensor(const std::vector<double>& wanted) : values(wanted.size()), buffer(wanted.size()) {
    std::vector<typename S::Host> host(wanted.size());
    for (size_t i = 0; i < wanted.size(); ++i) {
      host[i] = S::encode(wanted[i]);
      values[i] = S::decode(host[i]);
    }
    buffer.upload(host);
  }
  // Offsets step over host elements: bf16 is an incomplete type here (same size as uint16_t).
  typename S::Device* at(size_t offset = 0) const {
    return reinterpret_cast<typename S::Device*>(buffer.get() + offset);
  }
  std::vector<double> download() const {
    const std::vector<typename S::Host> host = buffer.download();
    std::vector<double> out(host.size());
    for (size_t i = 0; i < host.size(); ++i) out[i] = S::decode(host[i]);
    return out;
  }
};

inline std::vector<double> normal_values(std::mt19937_64& rng, size_t n, double mean = 0.0, double stddev = 1.0) {
  std::normal_distribution<double> normal(mean, stddev);
  std::vector<double> out(n);
  for (double& x : out) x = normal(rng);
  return out;
}

// A poisoned output tensor of n elements.
template <typename S>
DeviceTensor<S> poisoned_tensor(size_t n) {
  DeviceTensor<S> t(std::vector<double>(n, 0.0));
  t.buffer.poison();
  return t;
}

}  // namespace tandem::testing
