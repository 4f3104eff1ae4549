// Where a learner rank trains (learner.device), decided once from what this process has.
// The training code takes the result as a device parameter (at::Device in the Trainer);
// nothing past this point branches on CPU versus GPU.
//
// learner.device: cuda needs both a usable GPU for the rank (GPU `local_rank`: one per
// learner worker on a machine) and a libtorch built with CUDA (Debian's libtorch-dev is
// CPU-only: configure with -Dtorch_dir=PREFIX of a CUDA libtorch). Asked for where either
// is missing, it is an Error that names learner.device, each missing piece and the way
// out (learner.device: cpu), never a silent fallback. `auto` picks cuda only when both are
// there, else cpu, and says why.
//
// No libtorch in this header: the controller includes it.
#pragma once

#include <string>

namespace tandem {

// What this process offers a learner rank. Plain data, so that the decision below is
// tested with any combination on a machine without a GPU.
struct LearnerCudaSupport {
  bool gpu_usable = false;      // kernels/device_probe.h probe_cuda().usable
  int device_count = 0;         // GPUs this process sees
  std::string gpu_detail;       // the probe's device names, or why no GPU is usable
  bool torch_has_cuda = false;  // the linked libtorch has CUDA (at::hasCUDA())
  std::string torch_version;    // e.g. "1.13.1"
};

// Asks the CUDA runtime and libtorch. Initialises the CUDA runtime when there is one (a
// process that forks workers afterwards must not use CUDA in them: the controller only asks).
LearnerCudaSupport learner_cuda_support();

struct LearnerDevice {
  std::string type = "cpu";  // "cpu" or "cuda"
  int index = -1;            // the GPU (cuda: the rank's local rank); -1 on the CPU
  std::string reason;        // auto: why it picked `type`; empty otherwise
};

// learner.device ("cpu" | "cuda" | "auto") for the rank with `local_rank` on its machine.
// Throws Error (see above) when cuda cannot run here, or for an unknown value.
LearnerDevice resolve_learner_device(const std::string& requested, int local_rank, const LearnerCudaSupport& support);

// Why learner.device: cuda cannot run for `local_rank` with `support`; "" when it can.
std::string learner_cuda_unavailable_reason(int local_rank, const LearnerCudaSupport& support);

}  // namespace tandem
