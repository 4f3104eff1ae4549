// A build without NCCL (no nvcc or no NCCL found when tandem was configured): the NCCL
// collectives say so.
#include "core/error.h"
#include "learner/collectives_nccl.h"

namespace tandem {

std::unique_ptr<Collectives> make_nccl_collectives(const CollectivesOptions& options) {
  throw Error(fmt::format("{}: learner.device: cuda with {} learner ranks reduces over NCCL, and this tandem was built "
                          "without NCCL (configure with nvcc on PATH and NCCL found, -Dnccl_dir=PREFIX); or train on "
                          "the CPU with learner.device: cpu",
                          nccl_collectives_where(options), options.world_size));
}

}  // namespace tandem
