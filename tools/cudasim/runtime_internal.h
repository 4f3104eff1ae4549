// Private to the simulated CUDA runtime: its state (streams, events, allocations, the
// sticky error) and the stream machinery shared by runtime.cpp (streams, events, launches,
// devices, errors) and runtime_memory.cpp (allocations, copies, memsets). The threading
// model is described at the top of runtime.cpp. Not for cublas.cpp or nccl.cpp: they use
// runtime.h.
#pragma once

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cudasim::runtime {

// CUDASIM_DEVICE_MEMORY_MB: each simulated device's memory (default 4096 MiB).
size_t device_memory_bytes();
// CUDASIM_DEVICE_COUNT (runtime.cpp).
int read_device_count();
extern thread_local int current_device;  // cudaSetDevice is per host thread

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
Runtime& rt();

// Reports `why` on stderr and makes `e` the last error; returns `e`.
cudaError_t fail(cudaError_t e, const std::string& why);

Stream* legacy_stream(int device = current_device);
Stream* stream_of(cudaStream_t s);

// How a host call waits: a synchronisation blocks until the work is done; a query makes
// what progress it can and reports whether everything asked for ran.
enum class Wait { until_done, poll };

// Runs `stream`'s operations up to number `sequence`, and first what they wait for.
// Another host thread running this stream is waited for (or, polling, is "not ready").
bool run_to(Lock& lock, Stream* stream, uint64_t sequence, Wait wait);
// Everything queued on `device`'s streams (what a device-wide synchronisation waits for).
void run_device(Lock& lock, int device);

// Queues an operation on `s`, after what the legacy/blocking stream rules and `extra` say.
void push(Stream* s, std::string what, std::function<void()> work, std::vector<Dependency> extra = {},
          std::function<bool()> advance = {});

}  // namespace cudasim::runtime

// Every API call: the lock, and the sticky error of an earlier kernel fault.
#define CUDASIM_API_BEGIN \
  Runtime& r = rt();      \
  Lock lock(r.mutex);     \
  if (r.sticky_error != cudaSuccess) return r.sticky_error
