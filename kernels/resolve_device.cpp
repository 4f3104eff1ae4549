#include "core/error.h"
#include "core/log.h"
#include "kernels/device_probe.h"

namespace tandem {

std::string resolve_device(const std::string& requested, const std::string& key_path) {
  if (requested == "cpu") return "cpu";
  CudaProbe probe = probe_cuda();
  if (requested == "cuda") {
    if (!probe.usable) {
      throw UsageError(fmt::format("{}: cuda was asked for, but no CUDA device is usable: {}", key_path, probe.detail));
    }
    return "cuda";
  }
  if (requested == "auto") {
    std::string picked = probe.usable ? "cuda" : "cpu";
    log::info("{}: auto picked {} ({})", key_path, picked, probe.detail);
    return picked;
  }
  throw UsageError(fmt::format("{}: unknown device \"{}\" (allowed: cpu, cuda, auto)", key_path, requested));
}

}  // namespace tandem
