// cudasim's device as a running GPU thread calls it (device.h, through cudasim.h): its
// view of itself, __syncthreads and its counting forms, warp collectives, shared memory
// and faults, each checked for what a GPU leaves undefined (divergent barriers and
// collectives, masks naming absent lanes, misaligned packed accesses). The scheduler that
// runs the threads is device.cpp.
#include "device.h"
#include "device_internal.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace cudasim::device {
namespace {

bool same(const Site& a, const Site& b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
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
