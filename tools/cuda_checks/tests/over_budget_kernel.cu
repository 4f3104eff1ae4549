// Self-test input for ptxas_gate.py: each kernel is clean (no spills, no local memory) but
// over exactly one of its budgets in test_budgets.json, so each budget rule must fire once.

// 8 KiB of static shared memory against a 4 KiB budget.
__global__ void shared_memory_heavy_kernel(const float* in,  // [gridDim.x * 2048]
                                           float* out) {     // [gridDim.x * 2048]
  __shared__ float tile[2048];
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) tile[i] = in[blockIdx.x * 2048 + i];
  __syncthreads();
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) out[blockIdx.x * 2048 + i] = tile[2047 - i];
}

// Sixteen live accumulators need well over the 24-register budget.
__global__ void register_heavy_kernel(const float* in,  // [n * 16]
                                      float* out,       // [16]
                                      int n) {
  float acc[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) acc[j] = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[j] = acc[j] * in[i * 16 + j] + in[(i * 3 + j) % n];
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) atomicAdd(&out[j], acc[j]);
}
