#include "weight_sync/nccl_info.h"

#include <fmt/format.h>

#ifdef TANDEM_WITH_NCCL
#include <nccl.h>
#endif

namespace tandem {

std::string nccl_version() {
#ifdef TANDEM_WITH_NCCL
  int version = 0;
  ncclResult_t status = ncclGetVersion(&version);
  if (status != ncclSuccess) return fmt::format("unavailable ({})", ncclGetErrorString(status));
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", version / 10000, (version / 100) % 100, version % 100);
#else
  return "built without NCCL";
#endif
}

}  // namespace tandem
