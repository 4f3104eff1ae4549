// Private to cudasim's device (device.cpp, device_sync.cpp): the state of the running
// launch and block, the GPU threads as fibers, and the TSan annotations both halves make.
// One global State (never destroyed): a kernel's threads are fibers on the synchronising
// host thread, switched only at barriers, warp collectives and exit.
#pragma once

#include "device.h"
#include "fiber.h"
#include "options.h"
#include "sanitizers.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if CUDASIM_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace cudasim::device {

// Only barriers, __syncwarp and launch boundaries order one GPU thread's accesses before
// another's for TSan (shuffles and ballots order nothing, as on the GPU).
#if CUDASIM_TSAN
inline void release(void* sync) { __tsan_release(sync); }
inline void acquire(void* sync) { __tsan_acquire(sync); }
#else
inline void release(void*) {}
inline void acquire(void*) {}
#endif

// The simulator's own bookkeeping is not the kernel's memory traffic. The TSan variant
// builds these files uninstrumented (meson.build: CUDASIM_TSAN without -fsanitize=thread),
// since ignoring it at run time cost a stack-depot insertion per switch; an instrumented
// build of them ignores its accesses here.
#if defined(__SANITIZE_THREAD__)
struct Quiet {
  Quiet() { __tsan_ignore_thread_begin(); }
  ~Quiet() { __tsan_ignore_thread_end(); }
};
#else
struct Quiet {
  Quiet() {}  // user-provided, so that `Quiet q;` is not an unused variable
};
#endif

enum class Status { ready, at_barrier, in_warp_op, done, faulted };

struct Thread {
  explicit Thread(size_t stack_bytes) : fiber(stack_bytes) {}
  fiber::Fiber fiber;
  ThreadView view{};
  int linear = 0, warp = 0, lane = 0;
  Site wait_site{"", 0};
  const char* waiting_in = "";
};

constexpr int kWarpOpSlots = 4;  // collectives of disjoint masks may be in flight at once

struct WarpOp {
  bool active = false, complete = false;
  WarpKind kind = WarpKind::shfl_idx;
  unsigned mask = 0, arrived = 0;
  int readers = 0;
  Site site{"", 0};
  uint64_t in[32] = {}, out[32] = {};
  int arg[32] = {}, width[32] = {};
};

struct Warp {
  WarpOp ops[kWarpOpSlots];
  unsigned lanes = 0, exited = 0;
};

struct SharedObject {
  Site site;
  void* data;
};

// Happens-before objects of the running block (see run_block for why they are reused).
struct BlockSync {
  explicit BlockSync(size_t warps) : warp_ops(warps * kWarpOpSlots) {}
  char barrier[2] = {0, 0};
  std::vector<char> warp_ops;
};

struct Block {
  dim3 idx;
  int threads = 0, live = 0, exited = 0;
  std::vector<Warp> warps;
  std::vector<Status> status;  // by thread; contiguous, since the scheduler scans it all the time
  // The barrier being gathered.
  int arrived = 0;
  unsigned generation = 0;
  BarrierKind kind = BarrierKind::plain;
  Site site{"", 0};
  int64_t any = 0, all = 1, count = 0, result[2] = {0, 0};
  std::vector<SharedObject> shared;
  void* dynamic = nullptr;
  std::unique_ptr<BlockSync> sync;
  std::string fault;
};

struct State {
  std::vector<std::unique_ptr<Thread>> threads;  // fiber slots, reused by every block
  Thread* running = nullptr;
  const Launch* launch = nullptr;
  Block block;
  char grid_start = 0, grid_end = 0;  // launch boundaries
  std::mt19937_64 rng{options().seed};
};
// The one State: a plain global, defined in device.cpp (see there for why).
extern State& the_state;
inline State& state() { return the_state; }

// Fibers read `running` while the scheduler writes it: relaxed atomics are neither a race
// nor an ordering for TSan.
inline Thread* running() { return __atomic_load_n(&state().running, __ATOMIC_RELAXED); }
inline void set_running(Thread* t) { __atomic_store_n(&state().running, t, __ATOMIC_RELAXED); }

// For reports (device.cpp).
std::string str(const Site& s);
std::string str(const dim3& d);
std::string str(const uint3& d);
const char* name_of(WarpKind k);
const char* name_of(BarrierKind k);
std::string hex(unsigned mask);

// Heap storage for shared memory, filled with the poison byte (device.cpp).
void* poisoned(size_t bytes);

}  // namespace cudasim::device
