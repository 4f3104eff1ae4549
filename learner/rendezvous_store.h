// The rendezvous store of a learner group (collectives.h lists the addresses): where the
// Gloo process group meets, and where NCCL's unique id travels from rank 0 to the others.
// Private to learner/ (pulls in c10d's Store).
#pragma once

#include "learner/collectives.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace tandem {

// Opens (rank 0 of tcp:// serves) the store at options.rendezvous; Error for an address
// that is none of tcp://, file://, memory://. memory:// stores are shared by the threads
// of one process under their NAME.
c10::intrusive_ptr<c10d::Store> open_rendezvous_store(const CollectivesOptions& options);

}  // namespace tandem
