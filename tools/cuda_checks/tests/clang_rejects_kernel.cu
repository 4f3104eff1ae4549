// Self-test input for clang_cuda_syntax.py: must FAIL under -Wall -Wextra -Werror.
// `i < n` compares int with unsigned (-Wsign-compare) and `unused` is never read
// (-Wunused-variable). nvcc builds this file, warning only about `unused`: the sign
// comparison is what a second front end adds.
__global__ void clang_rejects_kernel(float* out,  // [n]
                                     unsigned n) {
  int unused = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = 0.f;
}
