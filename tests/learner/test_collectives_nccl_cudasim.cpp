// The learner's NCCL collectives (learner/collectives_nccl.cpp) running on the CUDA
// simulator (tools/cudasim: its CUDA runtime and NCCL, linked instead of libcudart and
// libnccl): ranks as threads, each on its own simulated GPU, host tensors staged through
// device memory. Every collective against values computed by hand; subgroups (the tensor
// and data groups of tensor parallelism) reduce over their members only; and a model
// split over 2 ranks with these collectives computes the unsplit model's logits.
#include "actor/policy_torch.h"
#include "learner/collectives.h"
#include "learner/tensor_parallel_ops.h"
#include "tests/support/forward_tolerance.h"
#include "tests/support/on_threads.h"
#include "tests/support/reference_model.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <doctest/doctest.h>

#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace tandem;
using namespace tandem::testing;

namespace {

std::unique_ptr<Collectives> nccl_rank(const std::string& name, int rank, int world) {
  CollectivesOptions o;
  o.rendezvous = "memory://" + name;
  o.rank = rank;
  o.world_size = world;
  o.timeout_s = 60;
  o.device = "cuda";
  o.cuda_device = rank;  // CUDASIM_DEVICE_COUNT simulated GPUs, one per rank
  return Collectives::create(o);
}

}  // namespace

TEST_CASE("NCCL collectives on the simulator: every collective, and subgroups over their members only") {
  constexpr int world = 4;
  std::vector<std::string> failures(world);
  on_threads(world, [&](int rank) {
    auto group = nccl_rank("nccl-cudasim-collectives", rank, world);
    auto fail = [&](const std::string& what) {
      if (failures[rank].empty()) failures[rank] = what;
    };
    at::Tensor sum = at::full({5}, static_cast<float>(rank + 1));
    group->all_reduce_sum(sum);
    if (!at::equal(sum, at::full({5}, 10.0f))) fail("all_reduce_sum");
    at::Tensor top = at::full({3}, static_cast<double>(rank));
    group->all_reduce_max(top);
    if (!at::equal(top, at::full({3}, 3.0, at::kDouble))) fail("all_reduce_max");
    // Rank r contributes r + j at position j of a [4 x 2] buffer; shard r sums positions [2r, 2r + 2).
    const at::Tensor full = at::arange(8, at::kFloat) + rank;
    at::Tensor shard = at::empty({2}, at::kFloat);
    group->reduce_scatter_sum(full, shard);
    const at::Tensor expected_shard = (at::arange(2 * rank, 2 * rank + 2, at::kFloat) * 4 + 6);
    if (!at::equal(shard, expected_shard)) fail("reduce_scatter_sum");
    at::Tensor gathered = at::empty({world * 2}, at::kFloat);
    group->all_gather(at::full({2}, static_cast<float>(rank)), gathered);
    if (!at::equal(gathered, at::tensor({0.f, 0.f, 1.f, 1.f, 2.f, 2.f, 3.f, 3.f}))) fail("all_gather");
    at::Tensor broadcast = at::full({2}, static_cast<float>(rank));
    group->broadcast(broadcast, 2);
    if (!at::equal(broadcast, at::full({2}, 2.0f))) fail("broadcast");
    // Tensor parallelism's groups: {0, 1}, {2, 3} and {0, 2}, {1, 3}, made in that order.
    auto tensor = group->subgroup("tensor-" + std::to_string(rank / 2), {rank / 2 * 2, rank / 2 * 2 + 1});
    auto data = group->subgroup("data-" + std::to_string(rank % 2), {rank % 2, rank % 2 + 2});
    if (tensor->rank() != rank % 2 || tensor->world_size() != 2) fail("tensor group rank");
    if (data->rank() != rank / 2 || data->world_size() != 2) fail("data group rank");
    at::Tensor in_tensor = at::full({4}, static_cast<float>(1 << rank));
    tensor->all_reduce_sum(in_tensor);
    const float tensor_sum = static_cast<float>((1 << (rank / 2 * 2)) + (1 << (rank / 2 * 2 + 1)));
    if (!at::equal(in_tensor, at::full({4}, tensor_sum))) fail("tensor group all_reduce");
    at::Tensor in_data = at::full({4}, static_cast<float>(1 << rank));
    data->all_reduce_sum(in_data);
    const float data_sum = static_cast<float>((1 << (rank % 2)) + (1 << (rank % 2 + 2)));
    if (!at::equal(in_data, at::full({4}, data_sum))) fail("data group all_reduce");
  });
  for (int rank = 0; rank < world; ++rank) CHECK_MESSAGE(failures[rank].empty(), "rank ", rank, ": ", failures[rank]);
}

TEST_CASE("a model split over 2 ranks with NCCL collectives (simulated) computes the unsplit model's logits") {
  const ModelConfig c = test_models()[3].config;  // qwen3: q/k norms, one KV head on both ranks
  const ModelWeights weights = random_model_weights(c, 23, 0.15, true);
  std::mt19937_64 rng(9);
  const TokenLayout layout = packed_layout({random_tokens(rng, 7, c.vocab_size), random_tokens(rng, 5, c.vocab_size)}, 12);
  at::Tensor expected;
  {
    c10::NoGradGuard no_grad;
    expected = PolicyModel(c, weights, at::kFloat).forward(layout);
  }
  for (bool sequence_parallel : {false, true}) {
    CAPTURE(sequence_parallel);
    std::vector<double> diff(2);
    on_threads(2, [&](int rank) {
      auto group = nccl_rank(std::string("nccl-cudasim-model-") + (sequence_parallel ? "sp" : "tp"), rank, 2);
      auto ops = std::make_shared<GroupTensorParallelOps>(*group, sequence_parallel);
      const PolicyModel part(c, weights, at::kFloat, std::nullopt, at::kCPU, ops);
      c10::NoGradGuard no_grad;
      diff[rank] = (part.forward(layout).to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>();
    });
    // Both forwards within forward_tolerance.h's bound of the exact one.
    const double bound = 2 * logit_tolerance(c, weights, layout.input_ids.size(1));
    for (double d : diff) CHECK(d <= bound);
  }
}
