// The parts of the NCCL collectives that need no GPU (collectives_nccl.h), compiled in
// every build.
#include "core/error.h"
#include "learner/collectives_nccl.h"
#include "weight_sync/nccl_id.h"

#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <thread>
#include <vector>

namespace tandem {

NcclType nccl_type_of(at::ScalarType type, const char* collective) {
  switch (type) {
    case at::kFloat: return NcclType::nccl_type_float32;
    case at::kBFloat16: return NcclType::nccl_type_bfloat16;
    case at::kDouble: return NcclType::nccl_type_float64;
    case at::kHalf: return NcclType::nccl_type_float16;
    case at::kChar: return NcclType::nccl_type_int8;
    case at::kByte: return NcclType::nccl_type_uint8;
    case at::kInt: return NcclType::nccl_type_int32;
    case at::kLong: return NcclType::nccl_type_int64;
    default:
      throw Error(fmt::format("{} over NCCL: tensors of {} are not supported (float32, bfloat16, float64, float16, "
                              "int8, uint8, int32, int64 are)",
                              collective, c10::toString(type)));
  }
}

void check_collective_shards(const char* collective, int64_t full_numel, int64_t shard_numel, int world_size) {
  TANDEM_CHECK(full_numel == shard_numel * world_size, "{}: {} elements are not {} shards of {}", collective,
               full_numel, world_size, shard_numel);
}

namespace {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

std::string exchange_nccl_unique_id(c10d::Store& store, const std::string& key, int rank,
                                    const std::function<std::string()>& make_id, double timeout_s,
                                    const std::string& where) {
  if (rank == 0) {
    const std::string id = make_id();
    TANDEM_CHECK(id.size() == kNcclUniqueIdBytes, "{}: an NCCL unique id has {} bytes, made {}", where,
                 kNcclUniqueIdBytes, id.size());
    store.set(key, std::vector<uint8_t>(id.begin(), id.end()));
    return id;
  }
  std::vector<uint8_t> bytes;
  try {
    store.wait({key}, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    bytes = store.get(key);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: no NCCL unique id from rank 0 (rendezvous key {}) within {} s: is rank 0 running? ({})",
                            where, key, timeout_s, first_line(e.what())));
  }
  if (bytes.size() != kNcclUniqueIdBytes) {
    throw Error(fmt::format("{}: the NCCL unique id under rendezvous key {} has {} bytes, not {}: another program's "
                            "key, or a stale rendezvous",
                            where, key, bytes.size(), kNcclUniqueIdBytes));
  }
  return std::string(bytes.begin(), bytes.end());
}

void wait_or_abort(const std::function<CollectivePoll()>& poll, const std::function<void()>& abort, double timeout_s,
                   const std::string& what, std::chrono::microseconds interval) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  while (true) {
    const CollectivePoll state = poll();
    if (state.done) return;
    if (!state.error.empty()) {
      abort();
      throw Error(fmt::format("{} failed: {}; the communicator was aborted", what, state.error));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      abort();
      throw Error(fmt::format("{} did not finish within {} s (a peer is gone or slower); the communicator was aborted",
                              what, timeout_s));
    }
    std::this_thread::sleep_for(interval);
  }
}

std::string nccl_collectives_where(const CollectivesOptions& options) {
  return fmt::format("learner rank {}/{} (NCCL, GPU {})", options.rank, options.world_size, options.cuda_device);
}

}  // namespace tandem
