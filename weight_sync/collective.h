// The `collective` weight transport: rank 0 broadcasts to every other rank over Gloo's TCP
// transport (any hosts, CPU memory), with the protocol of broadcast_protocol.h. Ranks meet
// through a rendezvous directory (options.address, see directory_store.h) and listen on
// options.host. Gloo stays inside collective.cpp.
#pragma once

#include "weight_sync/transport.h"

#include <memory>

namespace tandem {

std::unique_ptr<WeightSender> make_collective_sender(const WeightSyncOptions& options);
std::unique_ptr<WeightReceiver> make_collective_receiver(const WeightSyncOptions& options);

}  // namespace tandem
