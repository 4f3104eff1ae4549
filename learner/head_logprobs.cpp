#include "learner/head_logprobs.h"

#include "core/error.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

namespace tandem {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t rows_per_chunk(int64_t vocab, int64_t chunk_elements) { return std::max<int64_t>(1, chunk_elements / vocab); }

// Forward without autograd: per row, the log-sum-exp of the scaled logits (kept for
// backward), the target's log-prob and the entropy.
struct HeadForward {
  at::Tensor logprobs, entropy, log_normaliser;
};

HeadForward head_forward(const at::Tensor& hidden32, const at::Tensor& weight32, const at::Tensor& targets,
                         double temperature, int64_t chunk_elements) {
  const int64_t rows = hidden32.size(0), vocab = weight32.size(0);
  const at::TensorOptions f32 = hidden32.options().dtype(at::kFloat);
  HeadForward out{at::empty({rows}, f32), at::empty({rows}, f32), at::empty({rows}, f32)};
  const int64_t step = rows_per_chunk(vocab, chunk_elements);
  for (int64_t begin = 0; begin < rows; begin += step) {
    const int64_t n = std::min(step, rows - begin);
    at::Tensor log_p = at::mm(hidden32.narrow(0, begin, n), weight32.t()).mul_(1.0 / temperature);  // [n, V]
    at::Tensor lse = at::logsumexp(log_p, 1);
    log_p.sub_(lse.unsqueeze(1));
    at::Tensor chunk_targets = targets.narrow(0, begin, n).unsqueeze(1);
    out.logprobs.narrow(0, begin, n).copy_(log_p.gather(1, chunk_targets).squeeze(1));
    out.entropy.narrow(0, begin, n).copy_(log_p.exp().mul_(log_p).sum(1).neg_());
    out.log_normaliser.narrow(0, begin, n).copy_(lse);
  }
  return out;
}

// d logprob_i / d z_ij = [j = y_i] - p_ij and d entropy_i / d z_ij = -p_ij (log p_ij + H_i),
// where z = logits / temperature; the chain rule then goes through z = hidden · weightᵀ / T.
struct FusedHeadLogProbs : public torch::autograd::Function<FusedHeadLogProbs> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                               const at::Tensor& targets, double temperature, int64_t chunk_elements) {
    ctx->set_materialize_grads(false);
    HeadForward f = head_forward(hidden.to(at::kFloat), weight.to(at::kFloat), targets, temperature, chunk_elements);
    ctx->save_for_backward({hidden, weight, targets, f.log_normaliser, f.entropy});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk_elements"] = chunk_elements;
    return {f.logprobs, f.entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& hidden = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& targets = saved[2];
    const at::Tensor& lse = saved[3];
    const at::Tensor& entropy = saved[4];
    const double inverse_temperature = 1.0 / ctx->saved_data["temperature"].toDouble();
    const at::Tensor& grad_logprobs = grads[0];
    const at::Tensor& grad_entropy = grads[1];
    if (!grad_logprobs.defined() && !grad_entropy.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};

    const at::Tensor hidden32 = hidden.to(at::kFloat), weight32 = weight.to(at::kFloat);
    const int64_t rows = hidden32.size(0), vocab = weight32.size(0);
    at::Tensor grad_hidden = at::empty_like(hidden32);
    at::Tensor grad_weight = at::zeros_like(weight32);
    const int64_t step = rows_per_chunk(vocab, ctx->saved_data["chunk_elements"].toInt());
    for (int64_t begin = 0; begin < rows; begin += step) {
      const int64_t n = std::min(step, rows - begin);
      const at::Tensor h = hidden32.narrow(0, begin, n);
      at::Tensor log_p = at::mm(h, weight32.t()).mul_(inverse_temperature).sub_(lse.narrow(0, begin, n).unsqueeze(1));
      at::Tensor grad_z = log_p.exp();  // p, then -p * (g_lp + g_H (log p + H)) in place
      if (grad_entropy.defined()) {
        log_p.add_(entropy.narrow(0, begin, n).unsqueeze(1)).mul_(grad_entropy.narrow(0, begin, n).unsqueeze(1));
        if (grad_logprobs.defined()) log_p.add_(grad_logprobs.narrow(0, begin, n).unsqueeze(1));
        grad_z.mul_(log_p).neg_();
      } else {
        grad_z.mul_(grad_logprobs.narrow(0, begin, n).unsqueeze(1)).neg_();
      }
      if (grad_logprobs.defined()) {
        grad_z.scatter_add_(1, targets.narrow(0, begin, n).unsqueeze(1), grad_logprobs.narrow(0, begin, n).unsqueeze(1));
      }
      grad_z.mul_(inverse_temperature);
      grad_hidden.narrow(0, begin, n).copy_(at::mm(grad_z, weight32));
      grad_weight.addmm_(grad_z.t(), h);
    }
    return {grad_hidden.to(hidden.scalar_type()), grad_weight.to(weight.scalar_type()), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

HeadLogProbs head_logprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                           double temperature, int64_t chunk_elements) {
  TANDEM_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
               "head_logprobs: hidden [N, H] and weight [V, H], got {} and {}", c10::str(hidden.sizes()),
               c10::str(weight.sizes()));
  TANDEM_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0) && targets.scalar_type() == at::kLong,
               "head_logprobs: targets must be [N] int64 with N = {}", hidden.size(0));
  TANDEM_CHECK(temperature > 0, "temperature must be positive, got {}", temperature);
  TANDEM_CHECK(chunk_elements > 0, "chunk_elements must be positive, got {}", chunk_elements);
  const bool needs_graph = at::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  if (!needs_graph) {
    HeadForward f = head_forward(hidden.to(at::kFloat), weight.to(at::kFloat), targets, temperature, chunk_elements);
    return {f.logprobs, f.entropy};
  }
  variable_list out = FusedHeadLogProbs::apply(hidden, weight, targets, temperature, chunk_elements);
  return {out[0], out[1]};
}

}  // namespace tandem
