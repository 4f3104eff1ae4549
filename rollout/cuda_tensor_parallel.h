// The CUDA backend split over GPUs (rollout.tensor_parallel T, rollout.device cuda): one
// CudaBackend rank per device, devices [cuda_device, cuda_device + T), each holding its
// shard of the weights in the learner's layout (actor/tensor_parallel_layout.h) and a KV
// cache of its KV heads. At the split points the ranks call NCCL on their streams: the
// embedding and the o/down projections' partial sums are all-reduced, the LM head's
// vocabulary columns all-gathered, and rank 0 copies the logits to the host. Each rank runs
// on a host thread of its own (a pool of T threads), so the collectives meet.
//
// Numerics: the partial sums are added by NCCL, in an order of its choosing (a ring or a
// tree on GPUs, rank order under tools/cudasim), so a split engine's logits differ from an
// unsplit one's in the last bits of fp32; in bf16 each partial is rounded before the sum
// and the sum again.
//
// A rank that fails inside a step aborts every communicator (its peers may wait in a
// collective); the backend then refuses further steps, naming the first error.
#pragma once

#include "rollout/model_backend.h"

#include <memory>

namespace tandem {

// Throws Error when the model does not split over options.tensor_parallel ranks, the
// devices do not exist, or tandem was built without NCCL.
std::unique_ptr<ModelBackend> make_cuda_tensor_parallel_backend(const ModelConfig& config, const ModelWeights& weights,
                                                                const EngineOptions& options);

}  // namespace tandem
