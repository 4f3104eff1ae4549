#include "weight_sync/cuda_device.h"

#include <fmt/format.h>

#ifdef TANDEM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tandem {

std::string cuda_unavailable_reason(int device) {
#ifdef TANDEM_WITH_CUDA
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    return fmt::format("no GPU: cudaGetDeviceCount: {}: {}", cudaGetErrorName(status), cudaGetErrorString(status));
  }
  if (count == 0) return "no GPU: cudaGetDeviceCount found none";
  if (device < 0 || device >= count) return fmt::format("no GPU {}: this machine has {}", device, count);
  return "";
#else
  (void)device;
  return "built without CUDA (no nvcc when tandem was built)";
#endif
}

int cuda_device_count() {
#ifdef TANDEM_WITH_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
#else
  return 0;
#endif
}

}  // namespace tandem
