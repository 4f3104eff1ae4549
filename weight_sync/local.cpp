#include "weight_sync/local.h"

#include "core/error.h"

#include <mutex>
#include <optional>

namespace tandem {

namespace {

std::mutex mutex;
std::optional<LocalWeights> mailbox;

}  // namespace

void put_local_weights(LocalWeights weights) {
  std::lock_guard<std::mutex> lock(mutex);
  mailbox = std::move(weights);
}

LocalWeights take_local_weights() {
  std::lock_guard<std::mutex> lock(mutex);
  if (!mailbox) throw Error("weight_sync local: no weights were handed over in this process (is a learner colocated here?)");
  LocalWeights out = std::move(*mailbox);
  mailbox.reset();
  return out;
}

}  // namespace tandem
