// Kernels of cudasim's own tests (see self_test_kernels.h). Written as ordinary CUDA and
// rewritten by tools/cudasim/rewrite_cu.py like the project's kernels.
#include "tools/cudasim/tests/self_test_kernels.h"

namespace cudasim_test {
namespace {

__global__ void shuffles_kernel(float* out) {
  const int lane = threadIdx.x;
  const float v = 100.0f + lane;
  out[lane + 0 * 32] = __shfl_sync(0xffffffffu, v, 5);
  out[lane + 1 * 32] = __shfl_up_sync(0xffffffffu, v, 3);
  out[lane + 2 * 32] = __shfl_down_sync(0xffffffffu, v, 3);
  out[lane + 3 * 32] = __shfl_xor_sync(0xffffffffu, v, 6);
  out[lane + 4 * 32] = __shfl_sync(0xffffffffu, v, 5, 8);
  out[lane + 5 * 32] = __shfl_up_sync(0xffffffffu, v, 3, 8);
  out[lane + 6 * 32] = __shfl_down_sync(0xffffffffu, v, 3, 8);
  out[lane + 7 * 32] = __shfl_xor_sync(0xffffffffu, v, 6, 8);
}

__global__ void votes_kernel(unsigned* out) {
  const int lane = threadIdx.x % 32;
  const bool p = lane % 3 == 0;
  const unsigned ballot = __ballot_sync(0xffffffffu, p);
  const int any = __any_sync(0xffffffffu, lane == 31);
  const int all = __all_sync(0xffffffffu, p);
  const int count = __syncthreads_count(threadIdx.x < 40);
  const int any_block = __syncthreads_or(threadIdx.x == 63);
  const int all_block = __syncthreads_and(threadIdx.x < 40);
  if (threadIdx.x == 0) {
    out[0] = ballot;
    out[1] = any;
    out[2] = all;
    out[3] = count;
    out[4] = any_block;
    out[5] = all_block;
  }
}

__global__ void read_unwritten_shared_kernel(float* out) {
  __shared__ float never_written[64];
  __syncthreads();
  out[threadIdx.x] = never_written[threadIdx.x];
}

__global__ void fill_ones_kernel(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 1.0f;
}

__global__ void dynamic_shared_kernel(float* out) {
  extern __shared__ float area[];
  area[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = area[blockDim.x - 1 - threadIdx.x];
}

__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

__global__ void barrier_after_exit_kernel(float* out) {
  if (threadIdx.x >= 32) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void divergent_shuffle_kernel(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

__global__ void shuffle_outside_mask_kernel(float* out) {
  const float v = threadIdx.x;
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(0x0000ffffu, v, 8, 32);
}

struct alignas(16) Four {
  float v[4];
};
__global__ void misaligned_pack_kernel(float* out) {
#ifdef CUDASIM
  CUDASIM_CHECK_ALIGNED(out + 1, alignof(Four), "misaligned_pack_kernel");
#endif
  *reinterpret_cast<Four*>(out + 1) = Four{{1.0f, 2.0f, 3.0f, 4.0f}};
}

}  // namespace

void shuffles(float* out, cudaStream_t s) { shuffles_kernel<<<1, 32, 0, s>>>(out); }
void votes(unsigned* out, cudaStream_t s) { votes_kernel<<<1, 64, 0, s>>>(out); }
void read_unwritten_shared(float* out, cudaStream_t s) { read_unwritten_shared_kernel<<<1, 64, 0, s>>>(out); }
void fill_ones(float* out, int n, cudaStream_t s) { fill_ones_kernel<<<(n + 127) / 128, 128, 0, s>>>(out, n); }
void use_dynamic_shared(float* out, int threads, size_t dynamic_bytes, cudaStream_t s) {
  dynamic_shared_kernel<<<1, threads, dynamic_bytes, s>>>(out);
}
cudaError_t allow_dynamic_shared(int bytes) {
  return cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
void divergent_barrier(float* out, cudaStream_t s) { divergent_barrier_kernel<<<1, 64, 0, s>>>(out); }
void barrier_after_exit(float* out, cudaStream_t s) { barrier_after_exit_kernel<<<1, 64, 0, s>>>(out); }
void divergent_shuffle(float* out, cudaStream_t s) { divergent_shuffle_kernel<<<1, 32, 0, s>>>(out); }
void shuffle_outside_mask(float* out, cudaStream_t s) { shuffle_outside_mask_kernel<<<1, 32, 0, s>>>(out); }
void misaligned_pack(float* out, cudaStream_t s) { misaligned_pack_kernel<<<1, 1, 0, s>>>(out); }

}  // namespace cudasim_test
