// Host-side checks shared by the kernel launchers (private to kernels/*.cu): argument
// errors and CUDA errors both become tandem::Error naming the launcher.
#pragma once

#include "core/error.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace tandem::kernels {

// Throws "<what>: <call>: <name>: <description>" unless `status` is cudaSuccess.
inline void cuda_check(cudaError_t status, const char* what, const char* call) {
  if (status != cudaSuccess) {
    throw Error(fmt::format("{}: {}: {}: {}", what, call, cudaGetErrorName(status), cudaGetErrorString(status)));
  }
}

// After a launch: a bad configuration (too many threads, too much shared memory) shows up
// here; faults inside the kernel show up at the next synchronising call.
inline void check_launch(const char* what) { cuda_check(cudaGetLastError(), what, "kernel launch"); }

inline bool is_aligned(const void* pointer, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

// Threads for a block that loops over `items`: a multiple of the warp size, at most `max_threads`.
inline int block_threads_for(int64_t items, int max_threads) {
  const int64_t warps = (items + 31) / 32;
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(warps, 1) * 32, max_threads));
}

constexpr int64_t kMaxGridX = 2147483647;  // gridDim.x limit
constexpr int64_t kMaxGridYZ = 65535;      // gridDim.y and gridDim.z limit

}  // namespace tandem::kernels
