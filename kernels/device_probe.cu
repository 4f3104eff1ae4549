// CUDA build: asks the runtime (statically linked) what the driver offers.
#include "kernels/device_probe.h"

#include <cuda_runtime.h>

#include <string>

namespace tandem {

CudaProbe probe_cuda() {
  CudaProbe probe;
  probe.built_with_cuda = true;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    probe.detail = std::string("CUDA runtime: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error
    return probe;
  }
  probe.device_count = count;
  probe.usable = count > 0;
  if (count == 0) probe.detail = "no CUDA device found";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, i) == cudaSuccess) {
      if (!probe.detail.empty()) probe.detail += "; ";
      probe.detail += std::to_string(i) + ": " + props.name + " (sm_" + std::to_string(props.major) +
                      std::to_string(props.minor) + ", " +
                      std::to_string(props.totalGlobalMem >> 20) + " MiB)";
    }
  }
  return probe;
}

}  // namespace tandem
