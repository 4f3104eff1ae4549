#include "learner/fsdp_parameters.h"

#include "core/error.h"
#include "learner/collectives.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/accumulate.h>

namespace tandem {

FsdpParameters::FsdpParameters(const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                               const std::vector<size_t>& unit_sizes, Collectives& collectives)
    : parameters_(parameters), offsets_in_unit_(parameters.size()), collectives_(collectives) {
  const int world = collectives.world_size(), rank = collectives.rank();
  const at::Device device = parameters.empty() ? at::Device(at::kCPU) : parameters.front().second.device();
  f32_ = at::TensorOptions(at::kFloat).device(device);
  size_t next = 0;
  int64_t global = 0, local = 0;
  for (const auto& [name, p] : parameters) {
    TANDEM_CHECK(p.scalar_type() == at::kFloat, "parameter {} is {}, FSDP shards float32", name,
                 c10::toString(p.scalar_type()));
    TANDEM_CHECK(p.device() == device, "parameter {} is on {}, the first one on {}: FSDP units share a device", name,
                 p.device().str(), device.str());
    shapes_.push_back(p.sizes().vec());
  }
  for (size_t size : unit_sizes) {
    Unit u;
    u.first = next;
    u.count = size;
    u.global_offset = global;
    TANDEM_CHECK(next + size <= parameters.size(), "unit sizes cover more than the {} parameters", parameters.size());
    for (size_t i = next; i < next + size; ++i) {
      offsets_in_unit_[i] = u.numel;
      u.numel += parameters[i].second.numel();
    }
    u.shard_numel = (u.numel + world - 1) / world;
    u.local_offset = local;
    const int64_t begin = std::min(u.numel, rank * u.shard_numel);
    const int64_t end = std::min(u.numel, (rank + 1) * u.shard_numel);
    if (end > begin) owned_.push_back({u.global_offset + begin, u.local_offset, end - begin});
    next += size;
    global += u.numel;
    local += u.shard_numel;
    units_.push_back(u);
  }
  TANDEM_CHECK(next == parameters.size(), "unit sizes cover {} of {} parameters", next, parameters.size());
  local_values_ = at::zeros({local}, f32_);
  local_grads_ = at::zeros({local}, f32_);
  {
    c10::NoGradGuard no_grad;
    for (const Unit& u : units_) {
      at::Tensor full = at::zeros({u.shard_numel * world}, f32_);
      for (size_t i = u.first; i < u.first + u.count; ++i) {
        const at::Tensor& p = parameters_[i].second;
        full.narrow(0, offsets_in_unit_[i], p.numel()).copy_(p.detach().reshape({-1}));
      }
      local_values_.narrow(0, u.local_offset, u.shard_numel)
          .copy_(full.narrow(0, rank * u.shard_numel, u.shard_numel));
    }
  }
  for (size_t unit = 0; unit < units_.size(); ++unit) release(unit);
}

void FsdpParameters::gather(size_t unit) {
  Unit& u = units_.at(unit);
  if (u.full.defined()) return;
  u.full = at::empty({u.shard_numel * collectives_.world_size()}, f32_);
  // A unit without parameters (LoRA leaves the embeddings untrained) has nothing to gather.
  if (u.numel > 0) collectives_.all_gather(local_values_.narrow(0, u.local_offset, u.shard_numel), u.full);
  for (size_t i = u.first; i < u.first + u.count; ++i) {
    at::Tensor p = parameters_[i].second;  // a handle to the model's own leaf
    const int64_t n = c10::multiply_integers(shapes_[i]);
    p.set_data(u.full.narrow(0, offsets_in_unit_[i], n).view(shapes_[i]));
  }
}

void FsdpParameters::release(size_t unit) {
  Unit& u = units_.at(unit);
  for (size_t i = u.first; i < u.first + u.count; ++i) {
    at::Tensor p = parameters_[i].second;
    p.set_data(at::empty({0}, f32_));  // same device: set_data keeps a leaf on one
    p.mutable_grad() = at::Tensor();
  }
  u.full = at::Tensor();  // the gathered buffer is freed with its last view
}

void FsdpParameters::reduce_gradients(size_t unit) {
  Unit& u = units_.at(unit);
  TANDEM_CHECK(u.full.defined(), "reduce_gradients on unit {}, which is not gathered", unit);
  at::Tensor full_grad = at::zeros({u.shard_numel * collectives_.world_size()}, f32_);
  for (size_t i = u.first; i < u.first + u.count; ++i) {
    at::Tensor p = parameters_[i].second;
    if (p.grad().defined()) full_grad.narrow(0, offsets_in_unit_[i], p.numel()).copy_(p.grad().reshape({-1}));
    p.mutable_grad() = at::Tensor();
  }
  if (u.numel == 0) return;
  at::Tensor shard = at::empty({u.shard_numel}, f32_);
  collectives_.reduce_scatter_sum(full_grad, shard);
  local_grads_.narrow(0, u.local_offset, u.shard_numel).add_(shard);
}

}  // namespace tandem
