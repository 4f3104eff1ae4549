// The `collective` weight transport: rank 0 broadcasts to every other rank over Gloo's TCP
// transport (any hosts, CPU memory), with the protocol of broadcast_protocol.h. Ranks meet
// through a rendezvous directory (options.address, see directory_store.h) and listen on
// options.host. Gloo stays inside collective.cpp.
#pragma once

#include "weight_sync/transport.h"

#include <memory>
#include <string>

namespace tandem {

std::unique_ptr<WeightSender> make_collective_sender(const WeightSyncOptions& options);
std::unique_ptr<WeightReceiver> make_collective_receiver(const WeightSyncOptions& options);

// Marks the rendezvous directory `address` abandoned: ranks still waiting there for a rank
// that died fail at once instead of at their timeout. The controller calls it when it
// gives a group up.
void abandon_collective_rendezvous(const std::string& address);

}  // namespace tandem
