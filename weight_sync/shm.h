// The `shm` weight transport: a learner publishes its weights into a POSIX shared-memory
// segment (shm_segment.h); rollout workers on the same host map it, check every bucket's
// checksum, and copy the tensors out. A new version goes into a fresh segment, so a
// reader still mapping the previous one keeps reading it whole.
//
// The free functions are the older float32 interface, kept for their callers; they are
// thin wrappers over the shm transport (transport.h).
#pragma once

#include "weight_sync/tensor.h"
#include "weight_sync/transport.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

std::unique_ptr<WeightSender> make_shm_sender(const WeightSyncOptions& options);
std::unique_ptr<WeightReceiver> make_shm_receiver(const WeightSyncOptions& options);

using ShmStats = PublishStats;

// Writes `tensors` under POSIX shm name `name` ("/tandem-..."), replacing an older segment.
ShmStats publish_weights_shm(const std::string& name, const std::vector<OutgoingTensor>& tensors, int64_t version,
                             int64_t bucket_bytes);

// Maps segment `name` (no waiting), checks that the tensors are exactly `expected`
// (names, order-independent; shapes; dtypes, float32 only here) and every bucket's
// checksum, hands each to `sink` in the expected order; returns the version. Errors name
// the segment and the tensor or bucket at fault.
int64_t receive_weights_shm(const std::string& name, const std::vector<ExpectedTensor>& expected,
                            const TensorSink& sink);

// Removes the segment (no error if absent).
void remove_weights_shm(const std::string& name);

// The segment a controller with process id `pid` publishes its weights in: "/tandem-<pid>-weights".
std::string controller_weights_shm_name(int pid);
// Removes the controller segments of processes that no longer run (a controller killed
// with SIGKILL cannot remove its own); returns their names.
std::vector<std::string> remove_stale_weights_shm();

}  // namespace tandem
