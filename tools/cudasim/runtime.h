// The simulated CUDA runtime's own interface, beyond the CUDA API it implements
// (runtime.cpp): for cudasim's cuBLAS, and for tests of cudasim itself.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

namespace cudasim::runtime {

// Work on `stream` in stream order, run when the stream gets to it (the host's view of
// memory changes only then). `what` names it in reports.
void enqueue(cudaStream_t stream, std::string what, std::function<void()> work);
// Work that waits on something outside this process's streams (another rank of a simulated
// NCCL communicator), run WITHOUT the runtime's lock so that other host threads (other
// ranks of one process) keep calling the runtime meanwhile. `advance` makes what progress
// it can without blocking and returns true once the work is finished (done, failed or
// abandoned; it must give up by itself eventually). It is called when the host looks at
// the stream: a query (cudaStreamQuery, cudaEventQuery) calls it once and answers
// cudaErrorNotReady while it returns false; a synchronising call calls it until it returns
// true, backing off between calls. Calls never overlap.
void enqueue_polled(cudaStream_t stream, std::string what, std::function<bool()> advance);
// Whether [address, address + bytes) lies inside one live cudaMalloc allocation.
bool is_device_range(const void* address, size_t bytes);
// The device ordinal of the cudaMalloc allocation holding [address, address + bytes), or -1.
int device_of_range(const void* address, size_t bytes);
// The report of the first kernel fault since the last call ("" when none), clearing the
// sticky error it left, so that a test can expect a fault and go on.
std::string take_fault();
// The number of operations enqueued and not yet run, over all streams.
size_t pending_operations();

}  // namespace cudasim::runtime
