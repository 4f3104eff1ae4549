// GPU suite: the CUDA device probe on a machine with a GPU. Without one it reports a
// skip (exit 77) with the reason, never a silent pass.
#include "kernels/device_probe.h"

#include <cstdio>

int main() {
  tandem::CudaProbe probe = tandem::probe_cuda();
  if (!probe.usable) {
    std::printf("SKIP: no usable CUDA device: %s\n", probe.detail.c_str());
    return 77;
  }
  if (probe.device_count <= 0 || probe.detail.find("sm_") == std::string::npos) {
    std::printf("FAIL: probe says usable but reports %d devices (%s)\n", probe.device_count, probe.detail.c_str());
    return 1;
  }
  std::printf("ok: %d CUDA device(s): %s\n", probe.device_count, probe.detail.c_str());
  return 0;
}
