// The FSDP micro-batch: parameters gathered one unit at a time.
//
// Forward runs without autograd, layer by layer, keeping each layer's input; the head
// and the loss run with autograd from a detached copy of the last hidden state. Backward
// then walks the layers in reverse: re-gather, recompute the layer from its saved input
// with autograd, backpropagate the incoming gradient, reduce-scatter the layer's
// parameter gradients into this rank's shard, release. Peak parameter memory: the
// embeddings and head (kept for the whole micro-batch: tied heads reuse the embeddings)
// plus one layer. The cost: each layer's forward runs twice (activation recomputation).
#include "learner/trainer_impl.h"

#include <c10/core/GradMode.h>

namespace tandem {

at::Tensor Trainer::Impl::fsdp_trunk(const TokenLayout& layout, const PolicyModel::LayerContext& context,
                                     std::vector<at::Tensor>* inputs) {
  c10::NoGradGuard no_grad;
  at::Tensor hidden = model.embed(layout);
  for (int64_t l = 0; l < model.config().num_hidden_layers; ++l) {
    const size_t unit = static_cast<size_t>(l) + 1;
    fsdp->gather(unit);
    if (inputs) inputs->push_back(hidden);
    hidden = model.layer(l, hidden, context);
    fsdp->release(unit);
  }
  return hidden;
}

ObjectiveMetrics Trainer::Impl::fsdp_micro_batch(const MicroBatch& batch, const AggregationScale& scale) {
  const int64_t layers = model.config().num_hidden_layers;
  const size_t embed_unit = 0, head_unit = static_cast<size_t>(layers) + 1;
  auto layer_unit = [](int64_t layer) { return static_cast<size_t>(layer) + 1; };
  // Tensor parallelism: a unit's partial gradients are summed over the tensor group before
  // its gradients are reduce-scattered over the replicas (both are sums: either order).
  auto reduce_unit = [&](size_t unit) {
    if (tensor_ops) sum_partial_gradients(unit_first_parameter[unit], unit_first_parameter[unit + 1]);
    fsdp->reduce_gradients(unit);
  };

  fsdp->gather(embed_unit);
  fsdp->gather(head_unit);
  const PolicyModel::LayerContext context = model.layer_context(batch.layout, at::kFloat);
  std::vector<at::Tensor> inputs;  // inputs[l]: layer l's input
  at::Tensor top = fsdp_trunk(batch.layout, context, &inputs).detach().set_requires_grad(true);
  ObjectiveResult result = objective_from_trunk(top, batch, scale);
  result.loss.backward();
  at::Tensor grad = top.grad();

  for (int64_t l = layers - 1; l >= 0; --l) {
    fsdp->gather(layer_unit(l));
    at::Tensor input = inputs[l].detach().set_requires_grad(true);
    model.layer(l, input, context).backward(grad);
    grad = input.grad();
    reduce_unit(layer_unit(l));
    fsdp->release(layer_unit(l));
    inputs[l] = at::Tensor();  // free the activation as soon as it is used
  }
  // Under LoRA the embeddings are frozen: nothing below the first layer learns.
  const at::Tensor embedded = model.embed(batch.layout);
  if (embedded.requires_grad()) embedded.backward(grad);
  reduce_unit(embed_unit);
  reduce_unit(head_unit);
  fsdp->release(embed_unit);
  fsdp->release(head_unit);
  return result.metrics;
}

}  // namespace tandem
