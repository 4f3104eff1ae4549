// cudasim's device: runs a launch's blocks one after another, each block's threads as
// fibers, and checks what a GPU leaves undefined (see README.md).
#include "device.h"

#include "fiber.h"
#include "options.h"
#include "sanitizers.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <vector>

#if CUDASIM_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace cudasim::device {
namespace {

// Only barriers, __syncwarp and launch boundaries order one GPU thread's accesses before
// another's for TSan (shuffles and ballots order nothing, as on the GPU).
#if CUDASIM_TSAN
void release(void* sync) { __tsan_release(sync); }
void acquire(void* sync) { __tsan_acquire(sync); }
#else
void release(void*) {}
void acquire(void*) {}
#endif

// The simulator's own bookkeeping is not the kernel's memory traffic. The TSan variant
// builds this file uninstrumented (meson.build: CUDASIM_TSAN without -fsanitize=thread),
// since ignoring it at run time cost a stack-depot insertion per switch; an instrumented
// build of it ignores its accesses here.
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
// A plain global (a function-local static's guard check cost ~10% of a switch), never
// destroyed: fibers parked at exit must not see their stacks freed under them.
State& the_state = *new State;
State& state() { return the_state; }

// Fibers read `running` while the scheduler writes it: relaxed atomics are neither a race
// nor an ordering for TSan.
Thread* running() { return __atomic_load_n(&state().running, __ATOMIC_RELAXED); }
void set_running(Thread* t) { __atomic_store_n(&state().running, t, __ATOMIC_RELAXED); }

bool same(const Site& a, const Site& b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}
std::string str(const Site& s) { return std::string(s.file) + ":" + std::to_string(s.line); }
std::string str(const dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}
std::string str(const uint3& d) { return str(dim3(d.x, d.y, d.z)); }

const char* name_of(WarpKind k) {
  switch (k) {
    case WarpKind::shfl_idx: return "__shfl_sync";
    case WarpKind::shfl_up: return "__shfl_up_sync";
    case WarpKind::shfl_down: return "__shfl_down_sync";
    case WarpKind::shfl_xor: return "__shfl_xor_sync";
    case WarpKind::ballot: return "__ballot_sync";
    case WarpKind::any: return "__any_sync";
    case WarpKind::all: return "__all_sync";
    case WarpKind::syncwarp: return "__syncwarp";
  }
  return "?";
}
const char* name_of(BarrierKind k) {
  switch (k) {
    case BarrierKind::plain: return "__syncthreads";
    case BarrierKind::count_or: return "__syncthreads_or";
    case BarrierKind::count_and: return "__syncthreads_and";
    case BarrierKind::count: return "__syncthreads_count";
  }
  return "?";
}
std::string hex(unsigned mask) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", mask);
  return b;
}

// Parks the calling fiber until the scheduler sees it ready again.
void wait_while(Thread* t, Status status) {
  for (;;) {
    bool waiting;
    {
      Quiet q;
      waiting = state().block.status[t->linear] == status;
    }
    if (!waiting) return;
    fiber::yield();
  }
}

void on_thread_exit(Thread* t) {
  Block& b = state().block;
  Quiet q;
  Warp& w = b.warps[t->warp];
  w.exited |= 1u << t->lane;
  ++b.exited;
  --b.live;
  // Exiting while others wait at a barrier: the GPU's behaviour depends on the architecture.
  if (b.arrived > 0) {
    fault("exited while " + std::to_string(b.arrived) + " threads of the block wait in " + name_of(b.kind) + " at " +
              str(b.site),
          t->wait_site);
  }
  for (const WarpOp& op : w.ops) {
    if (op.active && !op.complete && (op.mask >> t->lane & 1u)) {
      fault(std::string("exited while lanes wait for it in ") + name_of(op.kind) + " at " + str(op.site) + " (mask " +
                hex(op.mask) + ")",
            t->wait_site);
    }
  }
  b.status[t->linear] = Status::done;
}

void thread_main() {
  State& s = state();
  Thread* t = running();
  acquire(&s.grid_start);
  s.launch->body();
  on_thread_exit(t);
  release(&s.grid_end);
  fiber::finish();
}

std::string describe_waits() {
  State& s = state();
  struct Group {
    std::string what;
    int threads = 0, first_warp = 0, last_warp = 0;
  };
  std::vector<Group> groups;
  int done = 0;
  for (int i = 0; i < s.block.threads; ++i) {
    const Thread& t = *s.threads[i];
    if (s.block.status[i] == Status::done) {
      ++done;
      continue;
    }
    const std::string what = std::string(t.waiting_in) + " at " + str(t.wait_site);
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.what == what; });
    if (g == groups.end()) {
      groups.push_back(Group{what, 0, t.warp, t.warp});
      g = groups.end() - 1;
    }
    ++g->threads;
    g->first_warp = std::min(g->first_warp, t.warp);
    g->last_warp = std::max(g->last_warp, t.warp);
  }
  std::string out;
  for (const Group& g : groups) {
    out += "\n  " + std::to_string(g.threads) + " threads (warps " + std::to_string(g.first_warp) + ".." +
           std::to_string(g.last_warp) + ") wait in " + g.what;
  }
  return out + "\n  " + std::to_string(done) + " of " + std::to_string(s.block.threads) + " threads exited";
}

void free_block_memory(Block& b) {
  for (SharedObject& o : b.shared) ::operator delete(o.data, std::align_val_t(128));
  b.shared.clear();
  if (b.dynamic) ::operator delete(b.dynamic, std::align_val_t(128));
  b.dynamic = nullptr;
}

void* poisoned(size_t bytes) {
  void* p = ::operator new(bytes ? bytes : 1, std::align_val_t(128));
  std::memset(p, options().poison, bytes);
  return p;
}

// Runs one block to completion; false with s.block.fault set when it faulted or deadlocked.
bool run_block(const dim3& idx) {
  State& s = state();
  const Launch& l = *s.launch;
  Block& b = s.block;
  b.idx = idx;
  b.live = b.threads;
  b.exited = 0;
  b.arrived = 0;
  b.generation = 0;
  b.fault.clear();
  const int warps = (b.threads + 31) / 32;
  b.warps.assign(warps, Warp{});
  b.status.assign(b.threads, Status::ready);
  for (int w = 0; w < warps; ++w) {
    const int lanes = std::min(32, b.threads - 32 * w);
    b.warps[w].lanes = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  }
  // Kept from block to block: new sync objects per block (so that TSan saw blocks as
  // unordered) cost TSan a stack-depot insertion each and made its runs several times
  // slower than CI allows. Blocks are therefore ordered for TSan; the order fuzzing and
  // the bit-for-bit comparison of runs are what catch races between blocks.
  if (!b.sync || b.sync->warp_ops.size() < static_cast<size_t>(warps) * kWarpOpSlots) {
    b.sync = std::make_unique<BlockSync>(static_cast<size_t>(warps));
  }
  if (l.dynamic_shared_bytes > 0) {
    b.dynamic = poisoned(l.dynamic_shared_bytes);
    release(b.dynamic);  // acquired by each thread in dynamic_shared()
  }
  for (int i = 0; i < b.threads; ++i) {
    Thread& t = *s.threads[i];
    t.linear = i;
    t.warp = i / 32;
    t.lane = i % 32;
    t.view.thread_idx = uint3{i % l.block.x, i / l.block.x % l.block.y, i / (l.block.x * l.block.y)};
    t.view.block_idx = idx;
    t.view.block_dim = l.block;
    t.view.grid_dim = l.grid;
    b.status[i] = Status::ready;
    t.wait_site = Site{"(start)", 0};
    t.waiting_in = "";
    // Fresh TSan identities per block made TSan runs 10x slower (a TSan thread per GPU
    // thread per block): slots keep theirs, so only thread i of one block and thread i of
    // another are ordered for TSan; every other pair of blocks stays unordered.
    t.fiber.start(&thread_main, /*fresh_identity=*/false);
  }
  std::vector<int> order(b.threads);
  for (int i = 0; i < b.threads; ++i) order[i] = i;
  if (options().order == Order::reverse) std::reverse(order.begin(), order.end());
  for (;;) {
    if (options().order == Order::shuffle) std::shuffle(order.begin(), order.end(), s.rng);
    bool ran = false, all_done = true;
    for (int i : order) {
      Thread& t = *s.threads[i];
      if (b.status[i] == Status::ready) {
        set_running(&t);
        t.fiber.resume();
        set_running(nullptr);
        ran = true;
        if (!b.fault.empty()) return false;
      }
      all_done = all_done && b.status[i] == Status::done;
    }
    if (all_done) return true;
    if (!ran) {
      b.fault = "block " + str(b.idx) + ": deadlock (a barrier or warp collective that not all its threads reach):" +
                describe_waits();
      return false;
    }
  }
}

// Fills each lane's result of a warp collective whose lanes have all arrived.
void complete(WarpOp& op, Warp& w, Thread* caller) {
  State& s = state();
  uint32_t ballot = 0;
  for (int l = 0; l < 32; ++l) {
    if ((op.mask >> l & 1u) && op.in[l] != 0) ballot |= 1u << l;
  }
  for (int l = 0; l < 32; ++l) {
    if (!(op.mask >> l & 1u)) continue;
    const int width = op.width[l], arg = op.arg[l];
    const bool shuffle = op.kind == WarpKind::shfl_idx || op.kind == WarpKind::shfl_up ||
                         op.kind == WarpKind::shfl_down || op.kind == WarpKind::shfl_xor;
    if (shuffle) {
      if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
        fault("lane " + std::to_string(l) + " passed width " + std::to_string(width) + " to " + name_of(op.kind) +
                  " (a power of 2 up to 32)",
              op.site);
      }
      const int base = l & ~(width - 1);
      int source = l;
      if (op.kind == WarpKind::shfl_idx) source = base + (arg & (width - 1));
      if (op.kind == WarpKind::shfl_up) source = l - base >= arg ? l - arg : l;
      if (op.kind == WarpKind::shfl_down) source = l - base + arg < width ? l + arg : l;
      if (op.kind == WarpKind::shfl_xor) source = (l ^ arg) < base + width ? (l ^ arg) : l;
      if (source < 0 || source > 31 || !(op.mask >> source & 1u)) {
        fault("lane " + std::to_string(l) + " in " + name_of(op.kind) + " reads lane " + std::to_string(source) +
                  ", which is not in the mask " + hex(op.mask) + " (its value is undefined)",
              op.site);
      }
      op.out[l] = op.in[source];
    } else if (op.kind == WarpKind::ballot) {
      op.out[l] = ballot;
    } else if (op.kind == WarpKind::any) {
      op.out[l] = ballot != 0;
    } else if (op.kind == WarpKind::all) {
      op.out[l] = ballot == op.mask;
    }
  }
  op.complete = true;
  op.readers = __builtin_popcount(op.mask);
  const int first = static_cast<int>(&w - s.block.warps.data()) * 32;
  for (int l = 0; l < 32; ++l) {
    if (op.mask >> l & 1u) s.block.status[first + l] = Status::ready;
  }
  (void)caller;
}

[[noreturn]] void bad_mask(WarpKind kind, unsigned mask, const Warp& w, int lane, Site site) {
  const std::string name = name_of(kind);
  if (!(mask >> lane & 1u)) fault(name + ": mask " + hex(mask) + " does not include the calling lane " + std::to_string(lane), site);
  if (mask & ~w.lanes) fault(name + ": mask " + hex(mask) + " names lanes this warp does not have", site);
  fault(name + ": mask " + hex(mask) + " includes lanes that have exited", site);
}

}  // namespace

const ThreadView& view() { return running()->view; }

void fault(const std::string& what, Site site) {
  State& s = state();
  Thread* t = running();
  {
    Quiet q;
    if (s.block.fault.empty()) {
      s.block.fault = "block " + str(s.block.idx) + " thread " + str(t->view.thread_idx) + ": " + what +
                      (site.line > 0 ? " (at " + str(site) + ")" : "");
    }
    s.block.status[t->linear] = Status::faulted;
  }
  for (;;) fiber::yield();
}

void check_aligned(const void* address, size_t alignment, const char* what, Site site) {
  if (reinterpret_cast<uintptr_t>(address) % alignment != 0) {
    char b[64];
    std::snprintf(b, sizeof b, "%p", address);
    fault(std::string("misaligned ") + what + ": address " + b + " is not " + std::to_string(alignment) +
              "-byte aligned",
          site);
  }
}

int64_t barrier(BarrierKind kind, int64_t predicate, Site site) {
  State& s = state();
  Block& b = s.block;
  Thread* t = running();
  unsigned generation;
  {
    Quiet q;
    if (b.exited > 0) {
      fault(std::string(name_of(kind)) + " reached after " + std::to_string(b.exited) +
                " threads of the block exited (every thread of the block must reach it)",
            site);
    }
    if (b.arrived == 0) {
      b.kind = kind;
      b.site = site;
      b.any = 0;
      b.all = 1;
      b.count = 0;
    } else if (b.kind != kind || !same(b.site, site)) {
      fault(std::string(name_of(kind)) + " while other threads of the block wait in " + name_of(b.kind) + " at " +
                str(b.site) + " (a divergent barrier)",
            site);
    }
    generation = b.generation;
    b.any |= predicate != 0;
    b.all &= predicate != 0;
    b.count += predicate != 0;
    ++b.arrived;
    b.status[t->linear] = Status::at_barrier;
    t->wait_site = site;
    t->waiting_in = name_of(kind);
  }
  release(&b.sync->barrier[generation & 1]);
  {
    Quiet q;
    if (b.arrived == b.live) {
      b.result[generation & 1] = kind == BarrierKind::count_or ? b.any : kind == BarrierKind::count_and ? b.all : b.count;
      ++b.generation;
      b.arrived = 0;
      for (int i = 0; i < b.threads; ++i) {
        if (b.status[i] == Status::at_barrier) b.status[i] = Status::ready;
      }
    }
  }
  wait_while(t, Status::at_barrier);
  acquire(&b.sync->barrier[generation & 1]);
  Quiet q;
  return b.result[generation & 1];
}

uint64_t warp_collective(WarpKind kind, unsigned mask, uint64_t value, int arg, int width, Site site) {
  State& s = state();
  Block& b = s.block;
  Thread* t = running();
  Warp& w = b.warps[t->warp];
  const unsigned bit = 1u << t->lane;
  WarpOp* op = nullptr;
  size_t slot = 0;
  {
    Quiet q;
    if (!(mask & bit) || (mask & ~w.lanes) || (mask & w.exited)) bad_mask(kind, mask, w, t->lane, site);
    for (size_t i = 0; i < kWarpOpSlots; ++i) {
      WarpOp& o = w.ops[i];
      if (!o.active || o.complete || !(o.mask & mask)) continue;
      // __syncwarp may meet at different sites; the data collectives must be the same call.
      const bool same_call = o.kind == kind && (kind == WarpKind::syncwarp || same(o.site, site));
      if (o.mask != mask || !same_call) {
        fault(std::string(name_of(kind)) + " (mask " + hex(mask) + ") while lanes of its mask wait in " +
                  name_of(o.kind) + " at " + str(o.site) + " (mask " + hex(o.mask) + "): a divergent warp collective",
              site);
      }
      op = &o;
      slot = i;
    }
    if (!op) {
      for (size_t i = 0; i < kWarpOpSlots && !op; ++i) {
        if (!w.ops[i].active) {
          op = &w.ops[i];
          slot = i;
        }
      }
      if (!op) fault(std::string(name_of(kind)) + ": more than 4 warp collectives of one warp in flight", site);
      op->active = true;
      op->complete = false;
      op->kind = kind;
      op->mask = mask;
      op->arrived = 0;
      op->readers = 0;
      op->site = site;
    }
    op->in[t->lane] = value;
    op->arg[t->lane] = arg;
    op->width[t->lane] = width;
    op->arrived |= bit;
    b.status[t->linear] = Status::in_warp_op;
    t->wait_site = site;
    t->waiting_in = name_of(kind);
  }
  char* sync = &b.sync->warp_ops[t->warp * kWarpOpSlots + slot];
  if (kind == WarpKind::syncwarp) release(sync);
  {
    Quiet q;
    if (op->arrived == mask) complete(*op, w, t);
  }
  wait_while(t, Status::in_warp_op);
  if (kind == WarpKind::syncwarp) acquire(sync);
  Quiet q;
  const uint64_t out = op->out[t->lane];
  if (--op->readers == 0) op->active = false;
  return out;
}

// Shared memory is allocated by one thread (the block's first to reach the declaration,
// or the scheduler for the dynamic array) and used by all: the allocation is released on
// its address and every thread acquires it, so that TSan orders the allocator's writes
// before the kernel's (GPU shared memory exists before the block starts).
void* static_shared(size_t bytes, size_t alignment, Site site) {
  Block& b = state().block;
  void* found = nullptr;
  {
    Quiet q;
    for (const SharedObject& o : b.shared) {
      if (same(o.site, site)) found = o.data;
    }
    if (!found) {
      if (alignment > 128) fault("__shared__ object aligned to more than 128 bytes", site);
      b.shared.push_back(SharedObject{site, poisoned(bytes)});  // its own heap block: ASan sees overflows
      release(b.shared.back().data);
      return b.shared.back().data;
    }
  }
  acquire(found);
  return found;
}

void* dynamic_shared(size_t alignment, Site site) {
  State& s = state();
  {
    Quiet q;
    if (alignment > 16) fault("extern __shared__ array aligned to more than 16 bytes", site);
    if (!s.block.dynamic) {
      fault("extern __shared__ array used by a launch with 0 bytes of dynamic shared memory", site);
    }
  }
  acquire(s.block.dynamic);
  return s.block.dynamic;
}

}  // namespace cudasim::device

namespace cudasim {

std::string run_grid(const Launch& launch) {
  using namespace device;
  State& s = state();
  const int threads = static_cast<int>(launch.block.x * launch.block.y * launch.block.z);
  std::vector<dim3> blocks;
  {
    Quiet q;
    s.launch = &launch;
    s.block.threads = threads;
    while (s.threads.size() < static_cast<size_t>(threads)) {
      s.threads.push_back(std::make_unique<Thread>(options().stack_bytes));
    }
    for (unsigned z = 0; z < launch.grid.z; ++z) {
      for (unsigned y = 0; y < launch.grid.y; ++y) {
        for (unsigned x = 0; x < launch.grid.x; ++x) blocks.push_back(dim3(x, y, z));
      }
    }
    if (options().order == Order::reverse) std::reverse(blocks.begin(), blocks.end());
    if (options().order == Order::shuffle) std::shuffle(blocks.begin(), blocks.end(), s.rng);
  }
  release(&s.grid_start);
  std::string report;
  for (const dim3& idx : blocks) {
    bool ok;
    {
      Quiet q;
      ok = run_block(idx);
      if (!ok) report = s.block.fault;
    }
    acquire(&s.grid_end);  // the block's threads are done with its shared memory
    {
      Quiet q;
      free_block_memory(s.block);
    }
    if (!ok) break;
  }
  acquire(&s.grid_end);
  Quiet q;
  s.launch = nullptr;
  if (!report.empty()) {
    report = std::string(launch.name) + " <<<" + str(launch.grid) + ", " + str(launch.block) + ", " +
             std::to_string(launch.dynamic_shared_bytes) + ">>> launched at " + str(launch.site) + ": " + report;
  }
  return report;
}

}  // namespace cudasim
