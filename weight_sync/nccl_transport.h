// The `nccl` weight transport (the file is not nccl.h: that name is NCCL's own header).
// Rank 0 broadcasts to every other rank with ncclBroadcast, with the protocol of
// broadcast_protocol.h. The communicator is made on the first call from
// options.nccl_unique_id (nccl_id.h), non-blocking so that a rank that never comes is an
// error after options.timeout_s, not a hang. Rank 0 keeps the stream in device memory
// (cuda_util.h DeviceStream) and broadcasts buckets straight from it; receivers get each
// bucket into device memory, copy it to pinned host memory, check it and hand it on.
// NCCL refuses two ranks on one GPU: each rank needs its own (options.cuda_device).
//
// Built only with NCCL (nccl_transport.cpp); without it (nccl_transport_unavailable.cpp)
// both make functions throw "built without NCCL". Without a GPU at run time they throw
// "no GPU".
#pragma once

#include "weight_sync/transport.h"

#include <memory>

namespace tandem {

std::unique_ptr<WeightSender> make_nccl_sender(const WeightSyncOptions& options);
std::unique_ptr<WeightReceiver> make_nccl_receiver(const WeightSyncOptions& options);

}  // namespace tandem
