#include "learner/flat_parameters.h"

#include "core/error.h"

#include <ATen/ATen.h>

namespace tandem {

FlatParameters::FlatParameters(const std::vector<std::pair<std::string, at::Tensor>>& parameters, int world_size)
    : world_size_(world_size) {
  TANDEM_CHECK(world_size >= 1, "world size must be >= 1, got {}", world_size);
  const at::Device device = parameters.empty() ? at::Device(at::kCPU) : parameters.front().second.device();
  for (const auto& [name, p] : parameters) {
    TANDEM_CHECK(p.device() == device, "parameter {} is on {}, the first one on {}: flat parameters share a device",
                 name, p.device().str(), device.str());
    TANDEM_CHECK(p.scalar_type() == at::kFloat, "parameter {} is {}, flat parameters hold float32", name,
                 c10::toString(p.scalar_type()));
    TANDEM_CHECK(p.requires_grad(), "parameter {} does not require grad", name);
    entries_.push_back({name, numel_, p.sizes().vec(), p.numel()});
    numel_ += p.numel();
  }
  const int64_t padded = (numel_ + world_size - 1) / world_size * world_size;
  values_ = at::zeros({padded}, at::TensorOptions(at::kFloat).device(device));
  grads_ = at::zeros({padded}, at::TensorOptions(at::kFloat).device(device));
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Entry& e = entries_[i];
    at::Tensor p = parameters[i].second;
    at::Tensor value_view = values_.narrow(0, e.offset, e.numel).view(e.shape);
    value_view.copy_(p.detach());
    p.set_data(value_view);  // the leaf keeps its identity; its storage is now the buffer
    p.mutable_grad() = grads_.narrow(0, e.offset, e.numel).view(e.shape);  // backward accumulates in place
  }
}

void FlatParameters::zero_grads() { grads_.zero_(); }

}  // namespace tandem
