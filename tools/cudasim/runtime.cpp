// The part of the CUDA runtime API that tandem's CUDA code calls, on host memory, for
// cudasim builds (linked instead of libcudart). Streams defer their work: a launch, copy
// or memset runs only when something waits for it (a synchronising call, an event, a
// synchronous copy on the legacy stream), so a missing synchronisation shows up as stale
// data instead of passing by luck. See README.md for what is and is not modelled.
//
// Threading: one lock guards the runtime's state, and kernels, copies and memsets run
// under it (device.cpp's scheduler is one global). Polled work (enqueue_polled: a simulated
// NCCL collective, which waits for other ranks that may be other host threads of this
// process) runs without it; while a host thread runs a stream's front operation the stream
// is `busy` and other threads that need it wait on `progress` (or, polling, answer "not
// ready"). Each simulated device has its own legacy default stream, and the current device
// is per host thread, as in CUDA, so ranks on different devices never order each other.
#include "runtime.h"

#include "device.h"
#include "options.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace cudasim::runtime {
namespace {

constexpr size_t kMaxStaticShared = 48 * 1024;     // without cudaFuncSetAttribute's opt-in
constexpr size_t kMaxOptinShared = 227 * 1024;     // sm_90
size_t device_memory_bytes() {
  const char* mb = std::getenv("CUDASIM_DEVICE_MEMORY_MB");
  return (mb ? std::strtoull(mb, nullptr, 10) : 4096) << 20;
}
// CUDASIM_DEVICE_COUNT: simulated devices of this process (default 1, at most 64), read
// once. Their memory is all host heap; each has its own legacy stream and memory budget.
constexpr int kMaxDevices = 64;
int read_device_count() {
  const char* text = std::getenv("CUDASIM_DEVICE_COUNT");
  if (!text || !*text) return 1;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (*end != '\0' || n < 1 || n > kMaxDevices) {
    std::fprintf(stderr, "cudasim: CUDASIM_DEVICE_COUNT=%s: expected 1 to %d\n", text, kMaxDevices);
    std::exit(2);
  }
  return static_cast<int>(n);
}
thread_local int current_device = 0;  // cudaSetDevice is per host thread

struct Stream;

// "Run `stream` up to its operation number `sequence`" before this one.
struct Dependency {
  Stream* stream;
  uint64_t sequence;
};

struct Operation {
  std::string what;
  std::vector<Dependency> after;
  std::function<void()> work;     // run under the lock; or, when empty,
  std::function<bool()> advance;  // polled without the lock until it returns true
};

struct Stream {
  int device = 0;
  bool blocking = true;  // synchronises with its device's legacy default stream
  std::deque<Operation> queue;
  uint64_t submitted = 0, executed = 0;
  bool busy = false;  // a host thread is running the front operation (the queue keeps it)
};

struct Event {
  Stream* stream = nullptr;  // nullptr: never recorded (complete)
  uint64_t sequence = 0;
};

enum class Memory { device, pinned };
struct Allocation {
  size_t bytes;
  Memory kind;
  int device;
};

using Lock = std::unique_lock<std::recursive_mutex>;

struct Runtime {
  Runtime() : device_count(read_device_count()), device_bytes_in_use(static_cast<size_t>(device_count)) {
    for (int d = 0; d < device_count; ++d) {
      legacy.push_back(std::make_unique<Stream>());
      legacy.back()->device = d;
    }
  }
  std::recursive_mutex mutex;
  std::condition_variable_any progress;  // a stream stopped being busy, or ran an operation
  const int device_count;
  std::vector<std::unique_ptr<Stream>> legacy;   // per device
  std::vector<std::unique_ptr<Stream>> streams;  // created ones (the legacy streams are not here)
  std::map<uintptr_t, Allocation> allocations;
  std::vector<size_t> device_bytes_in_use;       // per device
  std::map<const void*, size_t> max_dynamic_shared;  // cudaFuncSetAttribute opt-ins
  cudaError_t last_error = cudaSuccess;
  cudaError_t sticky_error = cudaSuccess;
  std::string fault;
  FILE* digest = nullptr;
  uint64_t digest_sequence = 0;
};
Runtime& rt() {
  static Runtime* r = new Runtime;  // never destroyed: streams may be torn down after main
  return *r;
}

cudaError_t fail(cudaError_t e, const std::string& why) {
  std::fprintf(stderr, "cudasim: %s: %s\n", cudaGetErrorName(e), why.c_str());
  rt().last_error = e;
  return e;
}

Stream* legacy_stream(int device = current_device) { return rt().legacy[static_cast<size_t>(device)].get(); }

Stream* stream_of(cudaStream_t s) {
  // 0, cudaStreamLegacy and cudaStreamPerThread are all the current device's one default
  // stream here.
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return legacy_stream();
  return reinterpret_cast<Stream*>(s);
}

// How a host call waits: a synchronisation blocks until the work is done; a query makes
// what progress it can and reports whether everything asked for ran.
enum class Wait { until_done, poll };

bool run_to(Lock& lock, Stream* stream, uint64_t sequence, Wait wait);

// Runs polled work without the lock; with Wait::until_done until it finishes.
bool advance_unlocked(Lock& lock, const std::function<bool()>& advance, Wait wait) {
  lock.unlock();
  bool done = advance();
  auto pause = std::chrono::microseconds(10);
  while (!done && wait == Wait::until_done) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
    done = advance();
  }
  lock.lock();
  return done;
}

// Runs `stream`'s front operation, and first what it waits for; false when polled work
// (its own or a dependency's) is not finished yet.
bool run_next(Lock& lock, Stream* stream, Wait wait) {
  Runtime& r = rt();
  stream->busy = true;
  Operation& op = stream->queue.front();  // stays put: only the busy holder pops the front
  bool done = true;
  for (const Dependency& d : op.after) {
    if (!run_to(lock, d.stream, d.sequence, wait)) {
      done = false;
      break;
    }
  }
  if (done && r.sticky_error == cudaSuccess) {
    if (op.work) {
      op.work();
    } else {
      done = advance_unlocked(lock, op.advance, wait);
    }
  }
  if (done) {
    stream->queue.pop_front();
    ++stream->executed;
  }
  stream->busy = false;
  r.progress.notify_all();
  return done;
}

// Runs `stream`'s operations up to number `sequence`, and first what they wait for.
// Another host thread running this stream is waited for (or, polling, is "not ready").
bool run_to(Lock& lock, Stream* stream, uint64_t sequence, Wait wait) {
  while (stream->executed < sequence && !stream->queue.empty()) {
    if (stream->busy) {
      if (wait == Wait::poll) return false;
      rt().progress.wait(lock);
      continue;
    }
    if (!run_next(lock, stream, wait)) return false;
  }
  return true;
}

// Everything queued on `device`'s streams (what a device-wide synchronisation waits for).
void run_device(Lock& lock, int device) {
  Runtime& r = rt();
  Stream* legacy = legacy_stream(device);
  run_to(lock, legacy, legacy->submitted, Wait::until_done);
  // By index: another thread may create streams while this one waits without the lock.
  for (size_t i = 0; i < r.streams.size(); ++i) {
    Stream* s = r.streams[i].get();
    if (s->device == device) run_to(lock, s, s->submitted, Wait::until_done);
  }
}

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

// Dependencies of new work on `s`: the legacy stream and blocking streams wait for each other.
// (Per device: each device has its own legacy stream.)
std::vector<Dependency> implicit_dependencies(Stream* s) {
  Runtime& r = rt();
  std::vector<Dependency> after;
  Stream* legacy = legacy_stream(s->device);
  if (s == legacy) {
    for (auto& other : r.streams) {
      if (other->blocking && other->device == s->device) after.push_back({other.get(), other->submitted});
    }
  } else if (s->blocking) {
    after.push_back({legacy, legacy->submitted});
  }
  return after;
}

void push(Stream* s, std::string what, std::function<void()> work, std::vector<Dependency> extra = {},
          std::function<bool()> advance = {}) {
  std::vector<Dependency> after = implicit_dependencies(s);
  after.insert(after.end(), extra.begin(), extra.end());
  s->queue.push_back(Operation{std::move(what), std::move(after), std::move(work), std::move(advance)});
  ++s->submitted;
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

void enqueue(cudaStream_t stream, std::string what, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> lock(rt().mutex);
  push(stream_of(stream), std::move(what), std::move(work));
}

void enqueue_polled(cudaStream_t stream, std::string what, std::function<bool()> advance) {
  std::lock_guard<std::recursive_mutex> lock(rt().mutex);
  push(stream_of(stream), std::move(what), {}, {}, std::move(advance));
}

bool is_device_range(const void* address, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(rt().mutex);
  return is_device(address, bytes);
}

int device_of_range(const void* address, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(rt().mutex);
  const Allocation* a = find_allocation(address, bytes);
  return a && a->kind == Memory::device ? a->device : -1;
}

std::string take_fault() {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  std::string f = std::move(r.fault);
  r.fault.clear();
  r.sticky_error = cudaSuccess;
  r.last_error = cudaSuccess;
  return f;
}

size_t pending_operations() {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  size_t n = 0;
  for (auto& s : r.legacy) n += s->queue.size();
  for (auto& s : r.streams) n += s->queue.size();
  return n;
}

}  // namespace cudasim::runtime

namespace cudasim {

void submit(Launch launch) {
  using namespace runtime;
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  const dim3 b = launch.block, g = launch.grid;
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  std::string bad;
  if (threads == 0 || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64) {
    bad = "block " + std::to_string(b.x) + "x" + std::to_string(b.y) + "x" + std::to_string(b.z) +
          " (at most 1024 threads, z <= 64)";
  } else if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
    bad = "grid " + std::to_string(g.x) + "x" + std::to_string(g.y) + "x" + std::to_string(g.z);
  }
  if (!bad.empty()) {
    fail(cudaErrorInvalidConfiguration, std::string(launch.name) + " at " + launch.site.file + ":" +
                                            std::to_string(launch.site.line) + ": " + bad);
    return;
  }
  const auto optin = r.max_dynamic_shared.find(launch.kernel);
  const size_t allowed = optin == r.max_dynamic_shared.end() ? kMaxStaticShared : optin->second;
  if (launch.dynamic_shared_bytes > allowed) {
    fail(cudaErrorInvalidValue, std::string(launch.name) + " at " + launch.site.file + ":" +
                                    std::to_string(launch.site.line) + ": " +
                                    std::to_string(launch.dynamic_shared_bytes) +
                                    " bytes of dynamic shared memory, over the " + std::to_string(allowed) +
                                    " allowed (above 48 KiB needs cudaFuncAttributeMaxDynamicSharedMemorySize)");
    return;
  }
  auto shared_launch = std::make_shared<Launch>(std::move(launch));
  push(stream_of(static_cast<cudaStream_t>(shared_launch->stream)), shared_launch->name, [shared_launch] {
    Runtime& rr = rt();
    const std::string report = run_grid(*shared_launch);
    if (!report.empty()) {
      std::fprintf(stderr, "cudasim: kernel fault: %s\n", report.c_str());
      if (rr.fault.empty()) rr.fault = report;
      rr.sticky_error = cudaErrorLaunchFailure;
    }
  });
}

}  // namespace cudasim

using namespace cudasim::runtime;

// Every API call: the lock, and the sticky error of an earlier kernel fault.
#define CUDASIM_API_BEGIN \
  Runtime& r = rt();      \
  Lock lock(r.mutex);     \
  if (r.sticky_error != cudaSuccess) return r.sticky_error

extern "C" {

cudaError_t cudaGetLastError(void) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  if (r.sticky_error != cudaSuccess) return r.sticky_error;
  return std::exchange(r.last_error, cudaSuccess);
}
cudaError_t cudaPeekAtLastError(void) {
  Runtime& r = rt();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  return r.sticky_error != cudaSuccess ? r.sticky_error : r.last_error;
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorLaunchFailure: return "unspecified launch failure (cudasim: a kernel fault, reported on stderr)";
    default: return "cudasim runtime error (the reason is on stderr)";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = rt().device_count;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  CUDASIM_API_BEGIN;
  if (device < 0 || device >= r.device_count) {
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): the simulator has " +
                                            std::to_string(r.device_count) + " device(s) (CUDASIM_DEVICE_COUNT)");
  }
  current_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  CUDASIM_API_BEGIN;
  if (device < 0 || device >= r.device_count) {
    return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(" + std::to_string(device) + "): the simulator has " +
                                            std::to_string(r.device_count) + " device(s) (CUDASIM_DEVICE_COUNT)");
  }
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "cudasim (simulated sm_90 on the CPU)");
  p->major = 9;
  p->minor = 0;
  p->totalGlobalMem = device_memory_bytes();
  p->multiProcessorCount = 132;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->sharedMemPerBlock = kMaxStaticShared;
  p->sharedMemPerBlockOptin = kMaxOptinShared;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerBlock = 65536;
  p->maxThreadsPerMultiProcessor = 2048;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  CUDASIM_API_BEGIN;
  *total_bytes = device_memory_bytes();
  *free_bytes = *total_bytes - std::min(*total_bytes, r.device_bytes_in_use[static_cast<size_t>(current_device)]);
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  CUDASIM_API_BEGIN;
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<size_t>(value) > kMaxOptinShared) {
      return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + std::to_string(value) +
                                             " bytes of dynamic shared memory (at most 227 KiB on sm_90)");
    }
    r.max_dynamic_shared[func] = static_cast<size_t>(value);
  }
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

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  CUDASIM_API_BEGIN;
  auto s = std::make_unique<Stream>();
  s->device = current_device;
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  *stream = reinterpret_cast<cudaStream_t>(s.get());
  r.streams.push_back(std::move(s));
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  CUDASIM_API_BEGIN;
  Stream* s = stream_of(stream);
  const auto it = std::find_if(r.streams.begin(), r.streams.end(), [&](const auto& x) { return x.get() == s; });
  if (it == r.streams.end()) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy of an unknown stream");
  run_to(lock, s, s->submitted, Wait::until_done);  // its work still completes
  // Other streams' pending work may wait on it: keep it as a finished stream, never reused.
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUDASIM_API_BEGIN;
  Stream* s = stream_of(stream);
  run_to(lock, s, s->submitted, Wait::until_done);
  return r.sticky_error;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUDASIM_API_BEGIN;
  Stream* s = stream_of(stream);
  // Nothing runs by itself here: a poll is where the host lets the device progress. Only
  // polled work (a collective waiting for its peers) can leave it unfinished.
  if (!run_to(lock, s, s->submitted, Wait::poll)) return r.sticky_error != cudaSuccess ? r.sticky_error : cudaErrorNotReady;
  return r.sticky_error;
}
cudaError_t cudaDeviceSynchronize(void) {
  CUDASIM_API_BEGIN;
  run_device(lock, current_device);
  return r.sticky_error;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  CUDASIM_API_BEGIN;
  *event = reinterpret_cast<cudaEvent_t>(new Event);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) { return cudaEventCreate(event); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  CUDASIM_API_BEGIN;
  delete reinterpret_cast<Event*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  CUDASIM_API_BEGIN;
  Event* e = reinterpret_cast<Event*>(event);
  e->stream = stream_of(stream);
  e->sequence = e->stream->submitted;  // complete once the stream has run what precedes it
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  CUDASIM_API_BEGIN;
  const Event* e = reinterpret_cast<Event*>(event);
  if (e->stream) run_to(lock, e->stream, e->sequence, Wait::until_done);
  return r.sticky_error;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  CUDASIM_API_BEGIN;
  const Event* e = reinterpret_cast<Event*>(event);
  // Nothing runs by itself here: a poll is where the host lets the device progress.
  if (e->stream && !run_to(lock, e->stream, e->sequence, Wait::poll)) {
    return r.sticky_error != cudaSuccess ? r.sticky_error : cudaErrorNotReady;
  }
  return r.sticky_error;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  CUDASIM_API_BEGIN;
  const Event* e = reinterpret_cast<Event*>(event);
  if (e->stream) push(stream_of(stream), "cudaStreamWaitEvent", [] {}, {{e->stream, e->sequence}});
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0.0f;  // no clock is simulated
  return cudaSuccess;
}

}  // extern "C"
