// What CUDA this process can use. Never crashes: a build without CUDA, a machine
// without a driver or without a GPU all come back as `usable = false` with the reason.
#pragma once

#include <string>

namespace tandem {

struct CudaProbe {
  bool built_with_cuda = false;
  bool usable = false;
  int device_count = 0;
  std::string detail;  // device names, or why CUDA cannot be used
};

CudaProbe probe_cuda();

// Resolves a `device:` config value ("cpu" | "cuda" | "auto") to "cpu" or "cuda".
// "cuda" without a usable GPU throws UsageError naming `key_path` and the reason.
std::string resolve_device(const std::string& requested, const std::string& key_path);

}  // namespace tandem
