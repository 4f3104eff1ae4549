// RAII for the CUDA backend's handles (private to rollout/cuda_backend.cpp and cuda_backend_setup.cpp): device memory,
// a stream, a cuBLAS handle; and the checks that turn CUDA and cuBLAS statuses into
// tandem::Error "rollout cuda backend: <where>: <call>: <status>".
#pragma once

#include "core/error.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

namespace tandem::cuda_backend {

inline void cuda_check(cudaError_t status, const std::string& where, const char* call) {
  if (status != cudaSuccess) {
    throw Error(fmt::format("rollout cuda backend: {}: {}: {}: {}", where, call, cudaGetErrorName(status),
                            cudaGetErrorString(status)));
  }
}

inline void cublas_check(cublasStatus_t status, const std::string& where, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(fmt::format("rollout cuda backend: {}: {}: {}: {}", where, call, cublasGetStatusName(status),
                            cublasGetStatusString(status)));
  }
}

// One cudaMalloc'd range; empty when 0 bytes.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(int64_t bytes, const std::string& what) : bytes_(bytes) {
    TANDEM_CHECK(bytes >= 0, "rollout cuda backend: {}: negative size {}", what, bytes);
    if (bytes > 0) {
      cuda_check(cudaMalloc(&data_, static_cast<size_t>(bytes)), fmt::format("allocating {} ({} bytes)", what, bytes),
                 "cudaMalloc");
    }
  }
  ~DeviceMemory() {
    if (data_) cudaFree(data_);  // nothing to do about an error here
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }

  template <typename U>
  U* as() const {
    return static_cast<U*>(data_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// A non-blocking stream: it does not synchronise with the legacy default stream.
class Stream {
 public:
  Stream() { cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "setup", "cudaStreamCreateWithFlags"); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class CublasHandle {
 public:
  explicit CublasHandle(cudaStream_t stream) {
    cublas_check(cublasCreate(&handle_), "setup", "cublasCreate");
    const cublasStatus_t status = cublasSetStream(handle_, stream);
    if (status != CUBLAS_STATUS_SUCCESS) cublasDestroy(handle_);  // the destructor will not run
    cublas_check(status, "setup", "cublasSetStream");
  }
  ~CublasHandle() { cublasDestroy(handle_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace tandem::cuda_backend
