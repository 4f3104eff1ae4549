// The device side of cudasim as a rewritten kernel sees it (through cudasim.h): the
// running GPU thread, block-wide barriers, warp collectives, shared memory and faults.
// Implemented in device.cpp. A kernel's threads are fibers on the synchronising host
// thread, switched only at barriers, warp collectives and exit.
#pragma once

#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace cudasim {

// A place in the kernel source, for reports.
struct Site {
  const char* file;
  int line;
};

namespace device {

// What a GPU thread reads of itself and its block (written only by the scheduler).
struct ThreadView {
  uint3 thread_idx;
  dim3 block_idx, block_dim, grid_dim;
};
// The running GPU thread's view; valid only inside a kernel.
const ThreadView& view();

enum class BarrierKind { plain, count_or, count_and, count };
// __syncthreads and its counting forms: every live thread of the block, at the same site.
int64_t barrier(BarrierKind kind, int64_t predicate, Site site);

enum class WarpKind { shfl_idx, shfl_up, shfl_down, shfl_xor, ballot, any, all, syncwarp };
// A warp collective over `mask`; returns this lane's result (up to 8 bytes of data).
uint64_t warp_collective(WarpKind kind, unsigned mask, uint64_t value, int arg, int width, Site site);

// The block's storage of the `__shared__` declaration at `site`, poisoned on first use.
void* static_shared(size_t bytes, size_t alignment, Site site);
// The launch's dynamic shared memory (`extern __shared__`); nullptr when none.
void* dynamic_shared(size_t alignment, Site site);

// A kernel error: reported, the fiber parks for good, the launch fails.
[[noreturn]] void fault(const std::string& what, Site site);
// Packed accesses must be aligned as on the GPU (where a misaligned LDG.128 faults).
void check_aligned(const void* address, size_t alignment, const char* what, Site site);

}  // namespace device

// One kernel launch, as the rewritten `<<<...>>>` hands it to the runtime.
struct Launch {
  const char* name;  // the kernel expression as written
  Site site;
  const void* kernel;
  dim3 grid, block;
  size_t dynamic_shared_bytes;
  void* stream;  // cudaStream_t
  std::function<void()> body;  // the kernel applied to its copied arguments
};
// The runtime: validates the configuration now (an error is the launch's cudaGetLastError)
// and runs the grid when its stream gets to it.
void submit(Launch launch);

// Runs every block of a launch (runtime side). Returns "" or the fault's report.
std::string run_grid(const Launch& launch);

}  // namespace cudasim
