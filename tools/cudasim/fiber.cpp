#include "fiber.h"

#include "sanitizers.h"

#include <boost/context/detail/fcontext.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#if CUDASIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if CUDASIM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace cudasim::fiber {
namespace {

namespace bctx = boost::context::detail;

struct Scheduler {
  bctx::fcontext_t context = nullptr;  // where the scheduler continues when a fiber yields
  Fiber* running = nullptr;
  const void* asan_stack_bottom = nullptr;
  size_t asan_stack_size = 0;
  void* asan_fake_stack = nullptr;
  void* tsan_fiber = nullptr;
};
Scheduler scheduler;

// The switch bookkeeping is shared by fibers that TSan sees as threads with no ordering
// between them (by design: only the kernel's barriers order GPU threads). Relaxed atomics
// are neither a race nor an ordering for TSan.
template <typename T>
T get(const T& field) {
  return __atomic_load_n(&field, __ATOMIC_RELAXED);
}
template <typename T>
void put(T& field, T value) {
  __atomic_store_n(&field, value, __ATOMIC_RELAXED);
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "cudasim: fiber: %s\n", what);
  std::abort();
}

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// Switch bookkeeping on the fiber's side, right after it gains control.
void arrived_on_fiber(Fiber* fiber, void* fake_stack) {
#if CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, &scheduler.asan_stack_bottom, &scheduler.asan_stack_size);
#endif
  (void)fiber;
  (void)fake_stack;
}

}  // namespace

// Runs on the fiber's own stack when it is first resumed.
void entry_trampoline(void* transfer_context) {
  put(scheduler.context, transfer_context);
  Fiber* fiber = get(scheduler.running);
  arrived_on_fiber(fiber, nullptr);
  get(fiber->entry_)();
  die("a fiber's entry returned instead of calling finish()");
}

namespace {
void fcontext_entry(bctx::transfer_t t) { entry_trampoline(t.fctx); }
}  // namespace

Fiber::Fiber(size_t stack_bytes) {
  const size_t page = page_size();
  stack_bytes_ = (stack_bytes + page - 1) / page * page;
  void* map = mmap(nullptr, stack_bytes_ + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (map == MAP_FAILED) die("cannot map a fiber stack");
  stack_ = static_cast<char*>(map);
  static unsigned fibers_made = 0;
  color_ = fibers_made++ % 64 * 64;
  mprotect(stack_, page, PROT_NONE);  // guard page: an overflowing GPU thread faults here
#if CUDASIM_TSAN
  if (!scheduler.tsan_fiber) scheduler.tsan_fiber = __tsan_get_current_fiber();
  tsan_fiber_ = __tsan_create_fiber(0);
#endif
}

Fiber::~Fiber() {
#if CUDASIM_TSAN
  if (tsan_fiber_) __tsan_destroy_fiber(tsan_fiber_);
#endif
  munmap(stack_, stack_bytes_ + page_size());
}

void Fiber::start(Entry entry, bool fresh_identity) {
  entry_ = entry;
#if CUDASIM_ASAN
  // Frames that never returned left their redzones poisoned: the trampoline's at the top
  // of the stack always, a whole kernel's stack when a fault abandoned the fiber mid-body.
  const size_t top = stack_bytes_ < 16384 ? stack_bytes_ : 16384;
  const size_t dirty = get(stack_dirty_) ? stack_bytes_ : top;
  __asan_unpoison_memory_region(stack_ + page_size() + stack_bytes_ - dirty, dirty);
#endif
  put(stack_dirty_, true);
#if CUDASIM_TSAN
  if (fresh_identity) {
    __tsan_destroy_fiber(tsan_fiber_);
    tsan_fiber_ = __tsan_create_fiber(0);
  }
#endif
  (void)fresh_identity;
  // Stack tops a multiple of the page size apart all fall into the same cache sets; an
  // offset per fiber (up to 4 KiB in 64-byte steps) spreads them (switches were ~2x slower).
  context_ = bctx::make_fcontext(stack_ + page_size() + stack_bytes_ - color_, stack_bytes_ - color_, fcontext_entry);
}

void Fiber::resume() {
  if (get(scheduler.running)) die("resume() called from a fiber");
  put(scheduler.running, this);
#if CUDASIM_TSAN
  __tsan_switch_to_fiber(tsan_fiber_, __tsan_switch_to_fiber_no_sync);
#endif
#if CUDASIM_ASAN
  __sanitizer_start_switch_fiber(&scheduler.asan_fake_stack, stack_ + page_size(), stack_bytes_);
#endif
  const bctx::transfer_t back = bctx::jump_fcontext(context_, nullptr);
#if CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(scheduler.asan_fake_stack, nullptr, nullptr);
#endif
  context_ = back.fctx;
  put(scheduler.running, static_cast<Fiber*>(nullptr));
}

namespace {
// Fiber -> scheduler. `fake_stack_save` nullptr: this fiber's stack is done with.
void switch_to_scheduler(void** fake_stack_save) {
#if CUDASIM_TSAN
  __tsan_switch_to_fiber(scheduler.tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
#if CUDASIM_ASAN
  __sanitizer_start_switch_fiber(fake_stack_save, scheduler.asan_stack_bottom, scheduler.asan_stack_size);
#endif
  (void)fake_stack_save;
  const bctx::transfer_t t = bctx::jump_fcontext(get(scheduler.context), nullptr);
  put(scheduler.context, t.fctx);
}
}  // namespace

void yield() {
  Fiber* fiber = get(scheduler.running);
  if (!fiber) die("yield() called on the scheduler");
  switch_to_scheduler(&fiber->asan_fake_stack_);
  arrived_on_fiber(fiber, fiber->asan_fake_stack_);
}

void finish() {
  Fiber* fiber = get(scheduler.running);
  if (!fiber) die("finish() called on the scheduler");
  put(fiber->stack_dirty_, false);
  switch_to_scheduler(nullptr);
  die("a finished fiber was resumed");
}

Fiber* current() { return get(scheduler.running); }

}  // namespace cudasim::fiber
