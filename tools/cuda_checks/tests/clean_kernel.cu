// Self-test input: must PASS both checks (with test_budgets.json). Templated so the gate's
// demangling has to map clean_scale_kernel<float> and <double> to one budget entry.
template <typename T>
__global__ void clean_scale_kernel(T* data,  // [n]
                                   T scale,
                                   int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= scale;
}

template __global__ void clean_scale_kernel<float>(float*, float, int);
template __global__ void clean_scale_kernel<double>(double*, double, int);
