// Fibers for cudasim's GPU threads: Boost.Context's fcontext switch (a few instructions,
// no system call, unlike swapcontext), told to ASan and TSan so that both follow the
// switches. One scheduler (the OS thread's own stack) resumes fibers; a fiber yields back
// to it. Not thread-safe: cudasim runs every block on the thread that synchronises.
#pragma once

#include <cstddef>

namespace cudasim::fiber {

// The body a fiber runs, once per start; it must end with park() (never return).
using Entry = void (*)();

class Fiber;
// Fiber side: back to the scheduler; returns when resumed.
void yield();
// Fiber side, for good: back to the scheduler, never to return (the stack may be reused).
[[noreturn]] void finish();
// The fiber running now, or nullptr on the scheduler.
Fiber* current();
void entry_trampoline(void* scheduler_context);  // fiber.cpp's

class Fiber {
 public:
  explicit Fiber(size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // (Re)starts the fiber at `entry` on a clean stack; it first runs at the next resume().
  // `fresh_identity`: in TSan builds a new TSan thread, so that nothing this fiber did
  // before is program-ordered before what it does now (GPU blocks are not ordered).
  void start(Entry entry, bool fresh_identity);
  // Scheduler side: runs the fiber until it yields.
  void resume();

 private:
  friend void yield();
  friend void finish();  // [[noreturn]], declared above
  friend void entry_trampoline(void*);
  void* context_ = nullptr;  // where the fiber continues
  char* stack_ = nullptr;    // lowest address of the mapping (a guard page, then the stack)
  size_t stack_bytes_ = 0;
  size_t color_ = 0;  // bytes the stack starts below its top (see start())
  Entry entry_ = nullptr;
  void* tsan_fiber_ = nullptr;
  void* asan_fake_stack_ = nullptr;
  bool stack_dirty_ = false;  // a previous run was abandoned mid-stack (ASan shadow to clear)
};

}  // namespace cudasim::fiber
