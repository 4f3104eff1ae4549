// TensorParallelOps (actor/tensor_parallel.h) over a tensor-parallel group's Collectives:
// the forward/backward pairs of Megatron's f and g operators (and their sequence-parallel
// forms) as autograd functions, and a tally of every collective they run.
//
// The backward collectives run inside autograd's backward pass, on the calling thread (a
// CPU graph's backward runs there; a GPU one's on the device's thread, one per device):
// every rank's graph is the same, so the ranks reach them in the same order.
#pragma once

#include "actor/tensor_parallel.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace tandem {

class Collectives;

// How many collectives of each kind ran, and their bytes: the size of the tensor each
// reduces (all-reduce, reduce-scatter: the whole input) or produces (all-gather: the
// gathered tensor). Keys are "<phase> <kind>": phase forward (a layer's or the
// embedding's forward), backward (their gradients), head (the vocabulary-parallel
// log-probs' reductions), gradients (partial gradients summed before the optimizer step),
// gather (parameters gathered whole); kind all_reduce, all_reduce_max, all_gather, reduce_scatter.
struct CollectiveTally {
  struct Count {
    int64_t calls = 0;
    int64_t bytes = 0;
  };
  std::map<std::string, Count> counts;
  void add(const std::string& key, int64_t bytes);
  int64_t calls(const std::string& key) const;
  int64_t bytes(const std::string& key) const;
};

class GroupTensorParallelOps final : public TensorParallelOps {
 public:
  // `group` outlives this; its rank and size are spec's.
  GroupTensorParallelOps(Collectives& group, bool sequence_parallel);

  const TensorParallelSpec& spec() const override { return spec_; }
  at::Tensor copy_to_region(const at::Tensor& x) override;
  at::Tensor reduce_from_region(const at::Tensor& x) override;
  at::Tensor gather_sequence(const at::Tensor& x) override;
  at::Tensor reduce_scatter_sequence(const at::Tensor& x) override;
  at::Tensor gather_last_dim(const at::Tensor& x) override;
  at::Tensor gather_parameter(const at::Tensor& local, const ParameterShard& shard) override;
  // Forward identity, backward the gradient times `factor` (no collective).
  at::Tensor scale_gradient(const at::Tensor& x, double factor);

  Collectives& group() { return group_; }
  CollectiveTally& tally() { return tally_; }

  // The collectives themselves, counted under `phase` (no autograd; the functions above
  // pair them). Tensors are any layout; results are new tensors.
  at::Tensor all_reduce(const at::Tensor& x, const char* phase);
  at::Tensor all_reduce_max(const at::Tensor& x, const char* phase);
  at::Tensor all_gather(const at::Tensor& x, int64_t dim, const char* phase);       // ranks' x concatenated along dim
  at::Tensor reduce_scatter(const at::Tensor& x, int64_t dim, const char* phase);   // this rank's 1/T of the sum along dim

 private:
  Collectives& group_;
  TensorParallelSpec spec_;
  CollectiveTally tally_;
};

}  // namespace tandem
