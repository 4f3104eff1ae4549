#include "controller/cli/cli.h"
#include "core/protocol.h"
#include "kernels/device_probe.h"
#include "weight_sync/nccl_info.h"

#include <capnp/common.h>
#include <fmt/format.h>
#include <torch/version.h>
#include <zmq.h>

namespace tandem {

int cli_version() {
  int zmq_major = 0, zmq_minor = 0, zmq_patch = 0;
  zmq_version(&zmq_major, &zmq_minor, &zmq_patch);
  CudaProbe cuda = probe_cuda();
  fmt::print("tandem {}\n", TANDEM_VERSION);
  fmt::print("control protocol: {}\n", protocol_version());
  fmt::print("libtorch: {} (compiled against)\n", TORCH_VERSION);
  fmt::print("Cap'n Proto: {}.{}.{}\n", CAPNP_VERSION_MAJOR, CAPNP_VERSION_MINOR, CAPNP_VERSION_MICRO);
  fmt::print("ZeroMQ: {}.{}.{}\n", zmq_major, zmq_minor, zmq_patch);
  fmt::print("CUDA: {}\n", cuda.built_with_cuda ? "built with CUDA" : "built without CUDA");
  fmt::print("CUDA devices: {} ({})\n", cuda.device_count, cuda.detail);
  fmt::print("NCCL: {}\n", nccl_version());
  return 0;
}

}  // namespace tandem
