// The simulated CUDA runtime's memory (see runtime.cpp for the whole design): device
// and pinned allocations on the host heap, each device's memory budget, and the copies and
// memsets queued on streams, with the checks a CPU would let pass (a host pointer where
// device memory is due) and the digest of every device-to-host copy (CUDASIM_DIGEST).
#include "runtime.h"
#include "runtime_internal.h"

#include "options.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace cudasim::runtime {

size_t device_memory_bytes() {
  const char* mb = std::getenv("CUDASIM_DEVICE_MEMORY_MB");
  return (mb ? std::strtoull(mb, nullptr, 10) : 4096) << 20;
}

namespace {

uint64_t fnv1a(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void record_digest(const void* data, size_t bytes) {
  Runtime& r = rt();
  if (options().digest_path.empty()) return;
  if (!r.digest) {
    r.digest = std::fopen(options().digest_path.c_str(), "w");
    if (!r.digest) {
      std::fprintf(stderr, "cudasim: cannot write CUDASIM_DIGEST=%s\n", options().digest_path.c_str());
      std::exit(2);
    }
  }
  std::fprintf(r.digest, "%llu %zu %016llx\n", static_cast<unsigned long long>(r.digest_sequence++), bytes,
               static_cast<unsigned long long>(fnv1a(data, bytes)));
  std::fflush(r.digest);
}

const Allocation* find_allocation(const void* address, size_t bytes, uintptr_t* base = nullptr) {
  Runtime& r = rt();
  const auto a = reinterpret_cast<uintptr_t>(address);
  auto it = r.allocations.upper_bound(a);
  if (it == r.allocations.begin()) return nullptr;
  --it;
  if (a + bytes > it->first + it->second.bytes) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

bool is_device(const void* p, size_t n) {
  const Allocation* a = find_allocation(p, n);
  return a && a->kind == Memory::device;
}
bool is_pinned(const void* p, size_t n) {
  const Allocation* a = find_allocation(p, n);
  return a && a->kind == Memory::pinned;
}

std::string describe(const void* p, size_t n) {
  char b[96];
  std::snprintf(b, sizeof b, "[%p, +%zu bytes)", p, n);
  return b;
}

// The checks of a copy's direction: a host pointer where device memory is due (or the
// reverse) would silently work on a CPU.
cudaError_t check_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* call) {
  if (n == 0) return cudaSuccess;
  const bool dst_device = is_device(dst, n), src_device = is_device(src, n);
  const char* problem = nullptr;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!dst_device) problem = "the destination is not inside one device allocation";
      else if (src_device) problem = "the source is device memory, not host memory";
      break;
    case cudaMemcpyDeviceToHost:
      if (!src_device) problem = "the source is not inside one device allocation";
      else if (dst_device) problem = "the destination is device memory, not host memory";
      break;
    case cudaMemcpyDeviceToDevice:
      if (!dst_device || !src_device) problem = "source and destination must each lie inside one device allocation";
      break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      break;
    default:
      problem = "an unknown cudaMemcpyKind";
  }
  if (problem) {
    return fail(cudaErrorInvalidValue, std::string(call) + " of " + std::to_string(n) + " bytes from " +
                                           describe(src, n) + " to " + describe(dst, n) + ": " + problem);
  }
  return cudaSuccess;
}

cudaError_t enqueue_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, Stream* s, const char* call) {
  if (const cudaError_t e = check_copy(dst, src, n, kind, call)) return e;
  if (n == 0) return cudaSuccess;
  const bool to_host = kind == cudaMemcpyDeviceToHost || (kind == cudaMemcpyDefault && !is_device(dst, n));
  if (!is_device(src, n) && !is_pinned(src, n)) {
    // Pageable host memory is staged before the call returns, as CUDA does: the caller
    // may reuse it right away.
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                                static_cast<const unsigned char*>(src) + n);
    push(s, call, [dst, staged, n] { std::memcpy(dst, staged->data(), n); });
  } else {
    push(s, call, [dst, src, n, to_host] {
      std::memmove(dst, src, n);
      if (to_host) record_digest(dst, n);
    });
  }
  return cudaSuccess;
}

}  // namespace

bool is_device_range(const void* address, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(rt().mutex);
  return is_device(address, bytes);
}

int device_of_range(const void* address, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(rt().mutex);
  const Allocation* a = find_allocation(address, bytes);
  return a && a->kind == Memory::device ? a->device : -1;
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  CUDASIM_API_BEGIN;
  *total_bytes = device_memory_bytes();
  *free_bytes = *total_bytes - std::min(*total_bytes, r.device_bytes_in_use[static_cast<size_t>(current_device)]);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  CUDASIM_API_BEGIN;
  size_t& in_use = r.device_bytes_in_use[static_cast<size_t>(current_device)];
  if (in_use + bytes > device_memory_bytes()) {
    *p = nullptr;
    return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes: the simulated device has " +
                                               std::to_string(device_memory_bytes() - in_use) +
                                               " free (CUDASIM_DEVICE_MEMORY_MB)");
  }
  // Exact size and 256-byte alignment like cudaMalloc's: ASan sees a byte past the end.
  // Poisoned, so that a read of memory nothing wrote is visible.
  *p = ::operator new(bytes ? bytes : 1, std::align_val_t(256), std::nothrow);
  if (!*p) return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes");
  std::memset(*p, cudasim::options().poison, bytes);
  r.allocations[reinterpret_cast<uintptr_t>(*p)] = Allocation{bytes, Memory::device, current_device};
  in_use += bytes;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  CUDASIM_API_BEGIN;
  if (!p) return cudaSuccess;
  auto it = r.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.allocations.end() || it->second.kind != Memory::device) {
    return fail(cudaErrorInvalidValue, "cudaFree of " + describe(p, 0) + ", which cudaMalloc did not return");
  }
  run_device(lock, it->second.device);  // cudaFree synchronises the allocation's device
  it = r.allocations.find(reinterpret_cast<uintptr_t>(p));  // the lock was let go meanwhile
  if (it == r.allocations.end()) return fail(cudaErrorInvalidValue, "cudaFree of " + describe(p, 0) + " twice at once");
  r.device_bytes_in_use[static_cast<size_t>(it->second.device)] -= it->second.bytes;
  r.allocations.erase(it);
  ::operator delete(p, std::align_val_t(256));
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  CUDASIM_API_BEGIN;
  *p = ::operator new(bytes ? bytes : 1, std::align_val_t(256), std::nothrow);
  if (!*p) return fail(cudaErrorMemoryAllocation, "cudaMallocHost of " + std::to_string(bytes) + " bytes");
  r.allocations[reinterpret_cast<uintptr_t>(*p)] = Allocation{bytes, Memory::pinned, -1};
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) { return cudaMallocHost(p, bytes); }
cudaError_t cudaFreeHost(void* p) {
  CUDASIM_API_BEGIN;
  run_device(lock, current_device);
  const auto it = r.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.allocations.end() || it->second.kind != Memory::pinned) {
    return fail(cudaErrorInvalidValue, "cudaFreeHost of " + describe(p, 0) + ", which cudaMallocHost did not return");
  }
  r.allocations.erase(it);
  ::operator delete(p, std::align_val_t(256));
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  CUDASIM_API_BEGIN;
  return enqueue_copy(dst, src, n, kind, stream_of(stream), "cudaMemcpyAsync");
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  CUDASIM_API_BEGIN;
  Stream* legacy = legacy_stream();
  if (const cudaError_t e = enqueue_copy(dst, src, n, kind, legacy, "cudaMemcpy")) return e;
  run_to(lock, legacy, legacy->submitted, Wait::until_done);  // the host waits for the copy (and what precedes it)
  return r.sticky_error;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  CUDASIM_API_BEGIN;
  if (width > dpitch || width > spitch) {
    return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: width " + std::to_string(width) + " is over a pitch (" +
                                           std::to_string(dpitch) + ", " + std::to_string(spitch) + ")");
  }
  if (width == 0 || height == 0) return cudaSuccess;
  // The whole ranges are checked (and staged, when pageable) like one copy each.
  const size_t dst_span = dpitch * (height - 1) + width, src_span = spitch * (height - 1) + width;
  if (const cudaError_t e = check_copy(dst, src, std::min(dst_span, src_span), kind, "cudaMemcpy2DAsync")) return e;
  if ((kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) && !is_device(dst, dst_span)) {
    return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: destination " + describe(dst, dst_span) +
                                           " is not inside one device allocation");
  }
  if ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) && !is_device(src, src_span)) {
    return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: source " + describe(src, src_span) +
                                           " is not inside one device allocation");
  }
  const bool to_host = kind == cudaMemcpyDeviceToHost;
  push(stream_of(stream), "cudaMemcpy2DAsync", [=] {
    for (size_t row = 0; row < height; ++row) {
      std::memmove(static_cast<char*>(dst) + row * dpitch, static_cast<const char*>(src) + row * spitch, width);
      if (to_host) record_digest(static_cast<char*>(dst) + row * dpitch, width);
    }
  });
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t stream) {
  CUDASIM_API_BEGIN;
  if (n > 0 && !is_device(dst, n)) {
    return fail(cudaErrorInvalidValue, "cudaMemsetAsync of " + describe(dst, n) + ": not inside one device allocation");
  }
  push(stream_of(stream), "cudaMemsetAsync", [dst, value, n] { std::memset(dst, value, n); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* dst, int value, size_t n) {
  // Asynchronous to the host for device memory, as CUDA's is: ordered on the legacy stream.
  return cudaMemsetAsync(dst, value, n, nullptr);
}

}  // extern "C"
