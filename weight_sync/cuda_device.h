// Whether this process can use a GPU for the GPU weight transports (cuda_ipc, nccl).
// Never throws: a build without CUDA, a machine without a driver or without the GPU asked
// for all come back as a reason.
#pragma once

#include <string>

namespace tandem {

// "" when GPU `device` is usable; otherwise why not: "built without CUDA",
// "no GPU: cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is detected", ...
// Initialises the CUDA runtime when it can: a process that forks workers afterwards must
// not use CUDA in them (ask in a child instead).
std::string cuda_unavailable_reason(int device = 0);

// How many GPUs this process sees (0 without CUDA or a driver).
int cuda_device_count();

}  // namespace tandem
