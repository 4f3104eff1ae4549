// Kernels for cudasim's own tests (self_test_kernels.cu), each behind a host launcher.
// Some are correct and check the simulated semantics; some carry one planted GPU bug each,
// which the simulator must report.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cudasim_test {

// out[lane + 32 * k] for k = 0..7: __shfl_sync(src 5), __shfl_up_sync(3), __shfl_down_sync(3),
// __shfl_xor_sync(6), the same four with width 8, of value 100 + lane; one warp.
void shuffles(float* out, cudaStream_t stream);
// out[0..5]: __ballot_sync / __any_sync / __all_sync of (lane % 3 == 0), then
// __syncthreads_count / _or / _and of (threadIdx.x < 40) over 64 threads.
void votes(unsigned* out, cudaStream_t stream);
// out[i] = reads a __shared__ float before anything wrote it (so: the poison).
void read_unwritten_shared(float* out, cudaStream_t stream);
// out[i] = 1 for n threads in blocks of 128 (a plain correct kernel).
void fill_ones(float* out, int n, cudaStream_t stream);
// One block of `threads` threads using `dynamic_bytes` of dynamic shared memory.
void use_dynamic_shared(float* out, int threads, size_t dynamic_bytes, cudaStream_t stream);
// The dynamic-shared kernel with its opt-in above 48 KiB raised to `bytes`.
cudaError_t allow_dynamic_shared(int bytes);

// Planted bugs.
void divergent_barrier(float* out, cudaStream_t stream);   // two __syncthreads sites by thread
void barrier_after_exit(float* out, cudaStream_t stream);  // half the block returns first
void divergent_shuffle(float* out, cudaStream_t stream);   // a shuffle under a lane-dependent if
void shuffle_outside_mask(float* out, cudaStream_t stream);  // reads a lane its mask excludes
void misaligned_pack(float* out, cudaStream_t stream);     // a 16-byte access 4 bytes off

}  // namespace cudasim_test
