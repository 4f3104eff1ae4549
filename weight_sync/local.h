// The in-process weight handover of colocated placement: the learner role and the
// rollout role of one worker process share a mailbox; the learner puts its weights in,
// the rollout engine takes them out. No copy through shared memory or sockets.
#pragma once

#include "weight_sync/shm.h"

#include <cstdint>
#include <vector>

namespace tandem {

struct LocalWeights {
  std::vector<ExpectedTensor> tensors;
  std::vector<std::vector<float>> data;  // per tensor
  int64_t version = 0;
};

// Replaces what the mailbox holds.
void put_local_weights(LocalWeights weights);
// What the mailbox holds; an Error when nothing was put (no learner in this process).
LocalWeights take_local_weights();

}  // namespace tandem
