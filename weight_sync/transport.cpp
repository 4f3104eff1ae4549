#include "weight_sync/transport.h"

#include "core/error.h"
#include "core/unknown_name.h"
#include "weight_sync/collective.h"
#include "weight_sync/cuda_ipc.h"
#include "weight_sync/nccl_transport.h"
#include "weight_sync/shm.h"

#include <algorithm>

namespace tandem {

namespace {

[[noreturn]] void fail(const WeightSyncOptions& o, const std::string& what) {
  throw Error(fmt::format("weight_sync {}: {}", o.method, what));
}

void check_options(const WeightSyncOptions& o, bool sender) {
  const auto& known = weight_sync_methods();
  if (std::find(known.begin(), known.end(), o.method) == known.end()) {
    throw_unknown_name("weight_sync method", o.method, known);
  }
  if (o.bucket_bytes <= 0) fail(o, fmt::format("bucket_bytes must be positive, got {}", o.bucket_bytes));
  if (!(o.timeout_s >= 0)) fail(o, fmt::format("timeout_s must be >= 0, got {}", o.timeout_s));
  if (o.method == "shm" || o.method == "cuda_ipc") {
    if (o.address.size() < 2 || o.address[0] != '/' || o.address.find('/', 1) != std::string::npos) {
      fail(o, fmt::format("address must be a POSIX shm name like \"/tandem-weights\", got \"{}\"", o.address));
    }
    return;
  }
  // collective, nccl: a group where rank 0 sends.
  if (o.world_size < 2) fail(o, fmt::format("world_size must be at least 2 (a sender and a receiver), got {}", o.world_size));
  if (o.rank < 0 || o.rank >= o.world_size) fail(o, fmt::format("rank {} is outside [0, {})", o.rank, o.world_size));
  if (sender && o.rank != 0) fail(o, fmt::format("the sender is rank 0, got rank {}", o.rank));
  if (!sender && o.rank == 0) fail(o, "rank 0 is the sender; receivers are ranks 1 and up");
  if (o.method == "collective" && o.address.empty()) fail(o, "address (the rendezvous directory) is empty");
}

}  // namespace

const std::vector<std::string>& weight_sync_methods() {
  static const std::vector<std::string> methods = {"shm", "collective", "cuda_ipc", "nccl"};
  return methods;
}

std::unique_ptr<WeightSender> make_weight_sender(const WeightSyncOptions& options) {
  check_options(options, true);
  if (options.method == "shm") return make_shm_sender(options);
  if (options.method == "collective") return make_collective_sender(options);
  if (options.method == "cuda_ipc") return make_cuda_ipc_sender(options);
  return make_nccl_sender(options);
}

std::unique_ptr<WeightReceiver> make_weight_receiver(const WeightSyncOptions& options) {
  check_options(options, false);
  if (options.method == "shm") return make_shm_receiver(options);
  if (options.method == "collective") return make_collective_receiver(options);
  if (options.method == "cuda_ipc") return make_cuda_ipc_receiver(options);
  return make_nccl_receiver(options);
}

}  // namespace tandem
