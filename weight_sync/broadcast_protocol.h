// The protocol of the collective transports, over any BroadcastGroup:
//
//   1. rank 0 stages the tensors and takes each bucket's checksum;
//   2. broadcast: the header length (8 bytes), then the header (layout.h);
//   3. all-gather: each receiver's verdict on the header ("" or why it rejects it);
//      if anyone rejects, every rank stops here and throws (the group stays usable);
//   4. broadcast: each bucket; receivers check its checksum and unpack it into the sink;
//      a receiver that finds a bad bucket keeps draining the rest so the group stays in step;
//   5. all-gather: each receiver's verdict on the data; rank 0 throws if any failed.
//
// A sender that cannot publish (its tensors are invalid) sends {"abandoned": why} as the
// header instead, and every rank stops after step 2.
//
// Groups are made lazily, on the first publish or receive, by `connect` (so creating a
// sender or receiver never blocks). A failure of the group itself (timeout, lost peer)
// leaves the sender or receiver failed for good: later calls repeat that error.
#pragma once

#include "weight_sync/broadcast_group.h"
#include "weight_sync/transport.h"

#include <functional>
#include <memory>
#include <string>

namespace tandem {

using ConnectGroup = std::function<std::unique_ptr<BroadcastGroup>()>;

// `where` starts every error: "weight_sync collective rank 0 of 3 (rendezvous /dir)".
std::unique_ptr<WeightSender> make_broadcast_sender(ConnectGroup connect, const WeightSyncOptions& options,
                                                    const std::string& where);
std::unique_ptr<WeightReceiver> make_broadcast_receiver(ConnectGroup connect, const WeightSyncOptions& options,
                                                        const std::string& where);

}  // namespace tandem
