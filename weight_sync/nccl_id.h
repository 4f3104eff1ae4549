// The bootstrap of an `nccl` weight-sync group: rank 0 (the sender) makes a unique id, the
// controller carries its bytes to every rank (over ZeroMQ, hex in a JSON body), and each
// rank passes them as WeightSyncOptions::nccl_unique_id. NCCL's bootstrap root runs in the
// process that made the id: it must live until every rank has joined (rank 0 does).
#pragma once

#include <cstddef>
#include <string>

namespace tandem {

constexpr size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

// A fresh ncclUniqueId, as kNcclUniqueIdBytes raw bytes. Throws Error "built without NCCL".
std::string nccl_new_unique_id();

// Lowercase hex of the id, and back (Error for anything that is not 2 * kNcclUniqueIdBytes hex digits).
std::string nccl_unique_id_to_hex(const std::string& id);
std::string nccl_unique_id_from_hex(const std::string& hex);

}  // namespace tandem
