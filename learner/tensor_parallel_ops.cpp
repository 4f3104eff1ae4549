#include "learner/tensor_parallel_ops.h"

#include "core/error.h"
#include "learner/collectives.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/custom_function.h>

namespace tandem {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t tensor_bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// The ops object travels to backward as an integer in the context (saved_data holds IValues).
GroupTensorParallelOps& ops_of(AutogradContext* ctx) {
  return *reinterpret_cast<GroupTensorParallelOps*>(ctx->saved_data["ops"].toInt());
}

int64_t ops_handle(GroupTensorParallelOps* ops) { return reinterpret_cast<int64_t>(ops); }

// f: identity forward, gradients summed over the group.
struct CopyToRegion : public torch::autograd::Function<CopyToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t ops) {
    ctx->saved_data["ops"] = ops;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {ops_of(ctx).all_reduce(grads[0], "backward"), at::Tensor()};
  }
};

// g: summed over the group forward, gradient passed through.
struct ReduceFromRegion : public torch::autograd::Function<ReduceFromRegion> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, int64_t ops) {
    return reinterpret_cast<GroupTensorParallelOps*>(ops)->all_reduce(x, "forward");
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], at::Tensor()}; }
};

// Sequence parallelism's f: all-gather along L forward, reduce-scatter backward.
struct GatherSequence : public torch::autograd::Function<GatherSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t ops) {
    ctx->saved_data["ops"] = ops;
    return reinterpret_cast<GroupTensorParallelOps*>(ops)->all_gather(x, 1, "forward");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {ops_of(ctx).reduce_scatter(grads[0], 1, "backward"), at::Tensor()};
  }
};

// Sequence parallelism's g: reduce-scatter along L forward, all-gather backward.
struct ReduceScatterSequence : public torch::autograd::Function<ReduceScatterSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t ops) {
    ctx->saved_data["ops"] = ops;
    return reinterpret_cast<GroupTensorParallelOps*>(ops)->reduce_scatter(x, 1, "forward");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {ops_of(ctx).all_gather(grads[0], 1, "backward"), at::Tensor()};
  }
};

// Whole last dimension forward; backward keeps this rank's slice of the gradient.
struct GatherLastDim : public torch::autograd::Function<GatherLastDim> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t ops) {
    ctx->saved_data["ops"] = ops;
    ctx->saved_data["width"] = x.size(-1);
    return reinterpret_cast<GroupTensorParallelOps*>(ops)->all_gather(x, x.dim() - 1, "forward");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t width = ctx->saved_data["width"].toInt();
    const int rank = ops_of(ctx).spec().rank;
    return {grads[0].narrow(-1, rank * width, width).contiguous(), at::Tensor()};
  }
};

// Identity forward; the gradient scaled on its way back.
struct ScaleGradient : public torch::autograd::Function<ScaleGradient> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double factor) {
    ctx->saved_data["factor"] = factor;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0] * ctx->saved_data["factor"].toDouble(), at::Tensor()};
  }
};

}  // namespace

// Buffers the collectives write are made as normal tensors even inside InferenceMode (the
// reference policy's forward): Gloo fills them on its own threads, where an inference
// tensor may not be written in place.
struct NormalTensors {
  c10::InferenceMode off{false};
};

void CollectiveTally::add(const std::string& key, int64_t bytes) {
  Count& c = counts[key];
  ++c.calls;
  c.bytes += bytes;
}

int64_t CollectiveTally::calls(const std::string& key) const {
  auto it = counts.find(key);
  return it == counts.end() ? 0 : it->second.calls;
}

int64_t CollectiveTally::bytes(const std::string& key) const {
  auto it = counts.find(key);
  return it == counts.end() ? 0 : it->second.bytes;
}

GroupTensorParallelOps::GroupTensorParallelOps(Collectives& group, bool sequence_parallel) : group_(group) {
  spec_.size = group.world_size();
  spec_.rank = group.rank();
  spec_.sequence_parallel = sequence_parallel;
}

at::Tensor GroupTensorParallelOps::all_reduce(const at::Tensor& x, const char* phase) {
  const NormalTensors normal;
  at::Tensor sum = x.contiguous().clone();
  tally_.add(fmt::format("{} all_reduce", phase), tensor_bytes(sum));
  group_.all_reduce_sum(sum);
  return sum;
}

at::Tensor GroupTensorParallelOps::all_reduce_max(const at::Tensor& x, const char* phase) {
  const NormalTensors normal;
  at::Tensor top = x.contiguous().clone();
  tally_.add(fmt::format("{} all_reduce_max", phase), tensor_bytes(top));
  group_.all_reduce_max(top);
  return top;
}

at::Tensor GroupTensorParallelOps::all_gather(const at::Tensor& x, int64_t dim, const char* phase) {
  const NormalTensors normal;
  // The collectives concatenate flat buffers in rank order: the gathered dimension goes first.
  const at::Tensor front = x.movedim(dim, 0).contiguous();
  std::vector<int64_t> shape = front.sizes().vec();
  shape[0] *= spec_.size;
  at::Tensor full = at::empty(shape, front.options());
  at::Tensor flat = full.view({-1});
  tally_.add(fmt::format("{} all_gather", phase), tensor_bytes(full));
  group_.all_gather(front.view({-1}), flat);
  return full.movedim(0, dim);
}

at::Tensor GroupTensorParallelOps::reduce_scatter(const at::Tensor& x, int64_t dim, const char* phase) {
  const NormalTensors normal;
  TANDEM_CHECK(x.size(dim) % spec_.size == 0, "reduce_scatter: dimension {} of size {} does not split over {} ranks",
               dim, x.size(dim), spec_.size);
  const at::Tensor front = x.movedim(dim, 0).contiguous();
  std::vector<int64_t> shape = front.sizes().vec();
  shape[0] /= spec_.size;
  at::Tensor shard = at::empty(shape, front.options());
  at::Tensor flat = shard.view({-1});
  tally_.add(fmt::format("{} reduce_scatter", phase), tensor_bytes(front));
  group_.reduce_scatter_sum(front.view({-1}), flat);
  return shard.movedim(0, dim);
}

at::Tensor GroupTensorParallelOps::copy_to_region(const at::Tensor& x) {
  return CopyToRegion::apply(x, ops_handle(this));
}

at::Tensor GroupTensorParallelOps::reduce_from_region(const at::Tensor& x) {
  return ReduceFromRegion::apply(x, ops_handle(this));
}

at::Tensor GroupTensorParallelOps::gather_sequence(const at::Tensor& x) {
  return GatherSequence::apply(x, ops_handle(this));
}

at::Tensor GroupTensorParallelOps::reduce_scatter_sequence(const at::Tensor& x) {
  return ReduceScatterSequence::apply(x, ops_handle(this));
}

at::Tensor GroupTensorParallelOps::gather_last_dim(const at::Tensor& x) {
  return GatherLastDim::apply(x, ops_handle(this));
}

at::Tensor GroupTensorParallelOps::scale_gradient(const at::Tensor& x, double factor) {
  return ScaleGradient::apply(x, factor);
}

at::Tensor GroupTensorParallelOps::gather_parameter(const at::Tensor& local, const ParameterShard& shard) {
  if (shard.dim < 0) return local;
  // Every rank's block, and where each one sits (ranks may share a block: replicated KV heads).
  const at::Tensor blocks = all_gather(local.unsqueeze(0), 0, "gather");  // [T, local shape]
  const at::Tensor placement =
      all_gather(at::tensor({shard.begin, shard.length}, local.options().dtype(at::kLong)).unsqueeze(0), 0, "gather")
          .to(at::kCPU);
  at::Tensor full = at::empty(shard.canonical_shape, local.options());
  for (int r = 0; r < spec_.size; ++r) {
    const int64_t begin = placement[r][0].item<int64_t>(), length = placement[r][1].item<int64_t>();
    full.narrow(shard.dim, begin, length).copy_(blocks[r].narrow(shard.dim, 0, length));
  }
  return full;
}

}  // namespace tandem
