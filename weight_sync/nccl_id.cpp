#include "weight_sync/nccl_id.h"

#include "core/error.h"

#ifdef TANDEM_WITH_NCCL
#include <nccl.h>
#endif

#include <cstring>

namespace tandem {

std::string nccl_new_unique_id() {
#ifdef TANDEM_WITH_NCCL
  static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "ncclUniqueId changed size");
  ncclUniqueId id;
  const ncclResult_t status = ncclGetUniqueId(&id);
  if (status != ncclSuccess) {
    throw Error(fmt::format("weight_sync nccl: ncclGetUniqueId: {} ({})", ncclGetErrorString(status),
                            ncclGetLastError(nullptr)));
  }
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
#else
  throw Error("weight_sync nccl: built without NCCL (no NCCL when tandem was built); use shm or collective");
#endif
}

std::string nccl_unique_id_to_hex(const std::string& id) {
  TANDEM_CHECK(id.size() == kNcclUniqueIdBytes, "an NCCL unique id has {} bytes, got {}", kNcclUniqueIdBytes, id.size());
  std::string hex;
  for (unsigned char c : id) hex += fmt::format("{:02x}", c);
  return hex;
}

std::string nccl_unique_id_from_hex(const std::string& hex) {
  if (hex.size() != 2 * kNcclUniqueIdBytes || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw Error(fmt::format("weight_sync nccl: an NCCL unique id is {} lowercase hex digits, got \"{}\"",
                            2 * kNcclUniqueIdBytes, hex.substr(0, 40) + (hex.size() > 40 ? "..." : "")));
  }
  std::string id(kNcclUniqueIdBytes, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return id;
}

}  // namespace tandem
