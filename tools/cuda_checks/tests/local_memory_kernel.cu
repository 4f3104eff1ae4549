// Self-test input for ptxas_gate.py: must FAIL the local-memory rule.
// The index into `window` is only known at run time, so the array cannot live in registers
// and ptxas places it in local memory (a non-zero stack frame plus a -warn-lmem-usage warning).
__global__ void local_memory_kernel(const float* in,   // [n]
                                    const int* picks,  // [n]
                                    float* out,        // [n]
                                    int n) {
  float window[64];
  for (int i = 0; i < 64; ++i) window[i] = in[(threadIdx.x + i) % n];
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) out[t] = window[picks[t] & 63];
}
