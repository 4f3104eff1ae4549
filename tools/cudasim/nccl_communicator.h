// Private to cudasim's NCCL: one rank's communicator, shared by nccl.cpp (joining and the
// communicator calls) and nccl_collectives.cpp (the collectives queued on it), and the
// error reporting both use. The handle (ncclComm_t) holds the communicator through a
// shared_ptr, as do the collectives still queued on streams.
#pragma once

#include "nccl_segment.h"

#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace cudasim::nccl {

using Clock = std::chrono::steady_clock;

// "<s> s", for messages.
std::string seconds(double s);

// Says `why` on stderr and keeps it for ncclGetLastError (NULL's, and the communicator's
// when `last_error` is given); returns `status`.
ncclResult_t report(ncclResult_t status, const std::string& why, std::string* last_error = nullptr);

struct Communicator {
  std::mutex mutex;  // the fields below; collectives advance under it too
  int nranks = 0, rank = 0, device = 0;
  std::string name;  // of the segment
  double timeout_s = 30;
  size_t slot_bytes = 0;
  std::unique_ptr<Segment> segment;
  bool claimed = false;  // this rank's place in the segment is taken
  ncclResult_t async_error = ncclInProgress;  // ncclInProgress while joining
  std::string last_error;
  bool aborted = false;
  Clock::time_point joining_since = Clock::now();
  uint64_t collectives = 0;      // queued on this rank, numbered from 0
  uint64_t rounds_queued = 0;    // rounds of the queued collectives
  uint64_t rounds_done = 0;      // rounds this rank has finished

  std::string where() const { return "rank " + std::to_string(rank) + " of " + std::to_string(nranks); }
  void fail(ncclResult_t status, const std::string& why) {
    async_error = report(status, where() + ": " + why, &last_error);
  }
  std::string missing(const std::function<bool(const RankState&)>& in) const {
    std::string who;
    for (int q = 0; q < nranks; ++q) {
      if (!in(segment->rank(q))) who += (who.empty() ? "" : ", ") + std::to_string(q);
    }
    return who;
  }
};

}  // namespace cudasim::nccl

// The handle: the communicator lives on while queued collectives still hold it.
struct ncclComm {
  std::shared_ptr<cudasim::nccl::Communicator> state;
};
