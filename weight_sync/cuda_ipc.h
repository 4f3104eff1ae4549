// The `cuda_ipc` weight transport, for a sender and receivers on one GPU in different
// processes (CUDA refuses to open an IPC handle in the process that made it).
//
// The sender copies the stream (layout.h) into a device buffer it keeps, records an
// interprocess event after the copy, and publishes a small shm segment (options.address,
// shm_segment.h) with the header, the buffer's cudaIpcMemHandle and the event's
// cudaIpcEventHandle. A receiver maps the buffer (once per allocation), makes its stream
// wait on the event, copies each bucket to pinned host memory, checks its checksum, and
// hands the tensors to the sink. The buffer stays the sender's: it is reused by the next
// publish (reallocated only when the weights grow), so receivers must have taken a
// version before the next one is published.
//
// Built only with CUDA (cuda_ipc.cpp); without it (cuda_ipc_unavailable.cpp) both make
// functions throw "built without CUDA". Without a GPU at run time they throw "no GPU".
#pragma once

#include "weight_sync/transport.h"

#include <memory>

namespace tandem {

std::unique_ptr<WeightSender> make_cuda_ipc_sender(const WeightSyncOptions& options);
std::unique_ptr<WeightReceiver> make_cuda_ipc_receiver(const WeightSyncOptions& options);

}  // namespace tandem
