// Private to learner/: the NCCL collectives (learner.device: cuda) and the pieces of them
// that need no GPU, kept apart so that CPU tests run them (tests/learner/test_collectives_nccl.cpp).
//
// The communicator: rank 0 makes an ncclUniqueId and sets it in the group's rendezvous
// store (rendezvous_store.h, the same tcp:// / file:// / memory:// addresses as Gloo) under
// kNcclUniqueIdKey; the other ranks wait for it there, bounded by the timeout. Every rank
// then joins with ncclCommInitRankConfig, non-blocking, so that a rank that never comes is
// a timeout and an abort, not a hang. c10d's ProcessGroupNCCL is not used: Debian's
// libtorch has none.
//
// Each collective is queued on the communicator's CUDA stream and waited for by polling
// (the stream, and NCCL's asynchronous error) until `timeout_s`; past it, or on an error,
// the communicator is aborted (which unblocks the kernels) and the Error names the
// collective, the rank and the limit. The stream is a blocking one: it is ordered after
// the work libtorch queued on the legacy default stream (its default), so gradients a
// backward pass produced are complete before NCCL reads them, and libtorch's next kernels
// wait for NCCL's results.
#pragma once

#include "learner/collectives.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace c10d {
class Store;
}

namespace tandem {

// The NCCL collectives of `options` (device cuda, world_size > 1). Built without NCCL
// (collectives_nccl_unavailable.cpp) it throws an Error saying so; without a usable GPU
// `options.cuda_device` it throws naming the rank and why.
std::unique_ptr<Collectives> make_nccl_collectives(const CollectivesOptions& options);

// NCCL's element types, with ncclDataType_t's values (collectives_nccl.cpp checks them
// against nccl.h at compile time).
enum class NcclType : int {
  nccl_type_int8 = 0,
  nccl_type_uint8 = 1,
  nccl_type_int32 = 2,
  nccl_type_uint32 = 3,
  nccl_type_int64 = 4,
  nccl_type_uint64 = 5,
  nccl_type_float16 = 6,
  nccl_type_float32 = 7,
  nccl_type_float64 = 8,
  nccl_type_bfloat16 = 9,
};

// The NCCL type of a tensor's elements: float32 and bfloat16 (parameters, gradients),
// float64 (the trainer's reduced counts and metrics), float16 and the integers. Anything
// else (bool, complex, ...) is an Error naming `collective` and the dtype.
NcclType nccl_type_of(at::ScalarType type, const char* collective);

// `full_numel` must be `world_size` shards of `shard_numel` (reduce_scatter, all_gather;
// shared with the Gloo path). Error naming `collective` and the sizes otherwise.
void check_collective_shards(const char* collective, int64_t full_numel, int64_t shard_numel, int world_size);

constexpr const char* kNcclUniqueIdKey = "nccl_unique_id";

// Rank 0: `make_id()` (128 bytes, ncclGetUniqueId), set in `store` under `key`, returned.
// Other ranks: waits up to `timeout_s` for `key` and returns its bytes. Errors start with
// `where` and say what did not arrive or what was malformed.
std::string exchange_nccl_unique_id(c10d::Store& store, const std::string& key, int rank,
                                    const std::function<std::string()>& make_id, double timeout_s,
                                    const std::string& where);

// One look at an operation in flight: finished, still going (neither), or failed (`error`).
struct CollectivePoll {
  bool done = false;
  std::string error;  // non-empty: it failed (NCCL's or CUDA's words)
};

// Polls `poll` every `interval` until it is done. When it fails, or `timeout_s` passes
// first, calls `abort` once and throws Error "<what> failed: <error>" or "<what> did not
// finish within <timeout_s> s (...)". `what` names the rank and the collective.
void wait_or_abort(const std::function<CollectivePoll()>& poll, const std::function<void()>& abort, double timeout_s,
                   const std::string& what, std::chrono::microseconds interval = std::chrono::microseconds(50));

// "learner rank R/W (NCCL, GPU G)": how every NCCL error of the group starts.
std::string nccl_collectives_where(const CollectivesOptions& options);

}  // namespace tandem
