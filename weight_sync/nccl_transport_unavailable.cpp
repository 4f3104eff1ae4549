// The nccl transport of a build without CUDA or NCCL: a clear error instead.
#include "weight_sync/nccl_transport.h"

#include "core/error.h"

namespace tandem {

namespace {

[[noreturn]] void unavailable(const WeightSyncOptions& options) {
#ifdef TANDEM_WITH_CUDA
  const char* what = "built without NCCL (none found when tandem was built)";
#else
  const char* what = "built without CUDA (no nvcc when tandem was built)";
#endif
  throw Error(fmt::format("weight_sync nccl rank {}: {}; use shm or collective", options.rank, what));
}

}  // namespace

std::unique_ptr<WeightSender> make_nccl_sender(const WeightSyncOptions& options) { unavailable(options); }
std::unique_ptr<WeightReceiver> make_nccl_receiver(const WeightSyncOptions& options) { unavailable(options); }

}  // namespace tandem
