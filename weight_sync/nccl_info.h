// The NCCL this build links (weight transfer GPU-to-GPU, later issues).
#pragma once

#include <string>

namespace tandem {

// "2.27.3", or why there is none ("built without NCCL").
std::string nccl_version();

}  // namespace tandem
