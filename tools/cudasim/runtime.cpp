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
//
// This file: the runtime's state and stream scheduling, launches, streams, events, devices
// and errors. Allocations, copies and memsets are in runtime_memory.cpp; what both use is
// in runtime_internal.h.
#include "runtime.h"
#include "runtime_internal.h"

#include "device.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cudasim::runtime {

constexpr size_t kMaxStaticShared = 48 * 1024;     // without cudaFuncSetAttribute's opt-in
constexpr size_t kMaxOptinShared = 227 * 1024;     // sm_90
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

Runtime& rt() {
  static Runtime* r = new Runtime;  // never destroyed: streams may be torn down after main
  return *r;
}

cudaError_t fail(cudaError_t e, const std::string& why) {
  std::fprintf(stderr, "cudasim: %s: %s\n", cudaGetErrorName(e), why.c_str());
  rt().last_error = e;
  return e;
}

Stream* legacy_stream(int device) { return rt().legacy[static_cast<size_t>(device)].get(); }

Stream* stream_of(cudaStream_t s) {
  // 0, cudaStreamLegacy and cudaStreamPerThread are all the current device's one default
  // stream here.
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return legacy_stream();
  return reinterpret_cast<Stream*>(s);
}

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

void push(Stream* s, std::string what, std::function<void()> work, std::vector<Dependency> extra,
          std::function<bool()> advance) {
  std::vector<Dependency> after = implicit_dependencies(s);
  after.insert(after.end(), extra.begin(), extra.end());
  s->queue.push_back(Operation{std::move(what), std::move(after), std::move(work), std::move(advance)});
  ++s->submitted;
}

void enqueue(cudaStream_t stream, std::string what, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> lock(rt().mutex);
  push(stream_of(stream), std::move(what), std::move(work));
}

void enqueue_polled(cudaStream_t stream, std::string what, std::function<bool()> advance) {
  std::lock_guard<std::recursive_mutex> lock(rt().mutex);
  push(stream_of(stream), std::move(what), {}, {}, std::move(advance));
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
