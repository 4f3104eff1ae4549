#include "learner/learner_device.h"

#include "core/error.h"
#include "kernels/device_probe.h"

#include <ATen/Context.h>
#include <torch/version.h>

#include <vector>

namespace tandem {

LearnerCudaSupport learner_cuda_support() {
  const CudaProbe probe = probe_cuda();
  LearnerCudaSupport support;
  support.gpu_usable = probe.usable;
  support.device_count = probe.device_count;
  support.gpu_detail = probe.detail;
  support.torch_has_cuda = at::hasCUDA();
  support.torch_version = TORCH_VERSION;
  return support;
}

std::string learner_cuda_unavailable_reason(int local_rank, const LearnerCudaSupport& support) {
  std::vector<std::string> missing;
  if (!support.gpu_usable) {
    missing.push_back(fmt::format("no CUDA device is usable ({})", support.gpu_detail));
  } else if (local_rank >= support.device_count) {
    missing.push_back(fmt::format("learner rank {} on this machine needs GPU {}, and there are {} ({}): one GPU per "
                                  "learner worker (fewer learner.workers per machine)",
                                  local_rank, local_rank, support.device_count, support.gpu_detail));
  }
  if (!support.torch_has_cuda) {
    missing.push_back(fmt::format("the libtorch{} that tandem links has no CUDA (Debian's libtorch-dev is CPU-only): "
                                  "configure tandem with -Dtorch_dir=PREFIX of a CUDA libtorch (meson option torch_dir)",
                                  support.torch_version.empty() ? "" : " " + support.torch_version));
  }
  std::string reason;
  for (const std::string& m : missing) reason += (reason.empty() ? "" : "; and ") + m;
  return reason;
}

LearnerDevice resolve_learner_device(const std::string& requested, int local_rank, const LearnerCudaSupport& support) {
  TANDEM_CHECK(local_rank >= 0, "negative local rank {}", local_rank);
  if (requested == "cpu") return {};
  const std::string why_not = learner_cuda_unavailable_reason(local_rank, support);
  if (requested == "cuda") {
    if (!why_not.empty()) {
      throw Error(fmt::format("learner.device: cuda cannot train here: {}. Train on the CPU with learner.device: cpu",
                              why_not));
    }
    return {"cuda", local_rank, ""};
  }
  if (requested == "auto") {
    if (why_not.empty()) return {"cuda", local_rank, fmt::format("GPU {} of: {}", local_rank, support.gpu_detail)};
    return {"cpu", -1, why_not};
  }
  throw Error(fmt::format("learner.device: unknown device \"{}\" (allowed: cpu, cuda, auto)", requested));
}

}  // namespace tandem
