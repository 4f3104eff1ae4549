// Build without CUDA (no nvcc found, or -Dcuda=disabled).
#include "kernels/device_probe.h"

namespace tandem {

CudaProbe probe_cuda() {
  CudaProbe probe;
  probe.detail = "this tandem was built without CUDA (configure with nvcc on PATH, -Dcuda=enabled)";
  return probe;
}

}  // namespace tandem
