// The cuda_ipc transport of a build without CUDA: a clear error instead.
#include "weight_sync/cuda_ipc.h"

#include "core/error.h"

namespace tandem {

namespace {

[[noreturn]] void unavailable(const WeightSyncOptions& options) {
  throw Error(fmt::format("weight_sync cuda_ipc {}: built without CUDA (no nvcc when tandem was built); "
                          "use shm or collective",
                          options.address));
}

}  // namespace

std::unique_ptr<WeightSender> make_cuda_ipc_sender(const WeightSyncOptions& options) { unavailable(options); }
std::unique_ptr<WeightReceiver> make_cuda_ipc_receiver(const WeightSyncOptions& options) { unavailable(options); }

}  // namespace tandem
