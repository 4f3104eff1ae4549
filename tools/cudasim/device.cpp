// cudasim's device: runs a launch's blocks one after another, each block's threads as
// fibers, and checks what a GPU leaves undefined (see README.md). This file is the
// scheduler: the grid, each block's threads to completion, thread exit and deadlock
// reports. What a running GPU thread calls (barriers, warp collectives, shared memory,
// faults) is in device_sync.cpp; what both use is in device_internal.h.
#include "device.h"
#include "device_internal.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <vector>

namespace cudasim::device {

// A plain global (a function-local static's guard check cost ~10% of a switch), never
// destroyed: fibers parked at exit must not see their stacks freed under them.
State& the_state = *new State;

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

void* poisoned(size_t bytes) {
  void* p = ::operator new(bytes ? bytes : 1, std::align_val_t(128));
  std::memset(p, options().poison, bytes);
  return p;
}

namespace {

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

}  // namespace

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
