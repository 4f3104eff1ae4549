// Self-test input for ptxas_gate.py: must FAIL the spill rule when compiled with
// -maxrregcount=16. Thirty-two accumulators stay live across the loop, so they do not fit
// in 16 registers and ptxas spills them. Without the cap this kernel is clean.
__global__ void register_spill_kernel(const float* in,  // [n * 32]
                                      float* out,       // [32]
                                      int n) {
  float acc[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) acc[j] = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
#pragma unroll
    for (int j = 0; j < 32; ++j) acc[j] = acc[j] * in[i * 32 + j] + in[(i * 7 + j) % n];
  }
#pragma unroll
  for (int j = 0; j < 32; ++j) atomicAdd(&out[j], acc[j]);
}
