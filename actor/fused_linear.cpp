#include "actor/fused_linear.h"

#include "actor/onednn_matmul.h"
#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

namespace tandem {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The operands rounded to the compute dtype once and saved: backward reuses them.
class FusedLinears : public torch::autograd::Function<FusedLinears> {
 public:
  // The weights go in as an at::TensorList: libtorch's Function takes its tensors as inputs
  // (gradient edges). The kept casts go in as a std::vector, an opaque argument: they take no
  // gradient, and libtorch 1.13 refuses an undefined tensor as an input.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights,
                               const std::vector<at::Tensor>& kept_casts,
                               const std::vector<at::Tensor>& gradient_buffers, at::ScalarType compute) {
    ctx->set_materialize_grads(false);  // an output that reaches no loss costs no products
    const int64_t k = x.size(-1);
    const at::Tensor rows = x.reshape({-1, k}).to(compute);
    variable_list saved{rows}, out;
    std::vector<int64_t> sizes = x.sizes().vec();
    for (size_t i = 0; i < weights.size(); ++i) {
      const at::Tensor w = kept_casts[i].defined() ? kept_casts[i] : weights[i].to(compute);
      const int64_t n = w.size(0);
      at::Tensor y = at::empty({rows.size(0), n}, x.options().dtype(at::kFloat));
      onednn_matmul(rows, w.t(), y);
      saved.push_back(w);
      sizes.back() = n;
      out.push_back(y.view(sizes));
    }
    ctx->save_for_backward(saved);
    // Not saved_for_backward: other gradients added into the same buffer before this
    // backward runs would fail its version check. Only the defined ones, one entry each.
    for (size_t i = 0; i < gradient_buffers.size(); ++i) {
      if (gradient_buffers[i].defined()) ctx->saved_data["gradient_buffer_" + std::to_string(i)] = gradient_buffers[i];
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& rows = saved[0];
    const size_t count = saved.size() - 1;
    const int64_t k = rows.size(1);
    // Inputs: x, the weights, then three that are not tensors (casts, buffers, compute).
    variable_list grads(4 + count);
    at::Tensor dx;
    std::vector<int64_t> x_sizes;
    for (size_t i = 0; i < count; ++i) {
      if (!grad_outputs[i].defined()) continue;  // that output did not reach the loss
      const at::Tensor& w = saved[1 + i];
      const int64_t n = w.size(0);
      const at::Tensor grad = grad_outputs[i].reshape({-1, n}).to(rows.scalar_type()).contiguous();
      if (ctx->needs_input_grad(0)) {
        if (!dx.defined()) {
          dx = at::empty({rows.size(0), k}, grad_outputs[i].options().dtype(at::kFloat));
          x_sizes = grad_outputs[i].sizes().vec();
          x_sizes.back() = k;
          onednn_matmul(grad, w, dx);
        } else {
          onednn_matmul(grad, w, dx, /*accumulate=*/true);
        }
      }
      if (ctx->needs_input_grad(1 + i)) {
        const auto buffer = ctx->saved_data.find("gradient_buffer_" + std::to_string(i));
        if (buffer != ctx->saved_data.end()) {  // added in place: autograd gets nothing to add
          onednn_matmul(grad.t(), rows, buffer->second.toTensor(), /*accumulate=*/true);
          continue;
        }
        at::Tensor dweight = at::empty({n, k}, grad_outputs[i].options().dtype(at::kFloat));
        onednn_matmul(grad.t(), rows, dweight);
        grads[1 + i] = dweight;
      }
    }
    if (dx.defined()) grads[0] = dx.view(x_sizes);
    return grads;
  }
};

}  // namespace

bool fused_linear_applies(const at::Tensor& x, const at::Tensor& weight, at::ScalarType compute) {
  const bool weight_type = weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kBFloat16;
  return onednn_available() && x.device().is_cpu() && weight.device().is_cpu() && x.scalar_type() == at::kFloat &&
         weight_type && (compute == at::kFloat || compute == at::kBFloat16);
}

at::Tensor gradient_buffer_of(const at::Tensor& parameter) {
  if (!parameter.defined() || !parameter.is_leaf() || !parameter.requires_grad()) return at::Tensor();
  const at::Tensor& grad = parameter.grad();
  const bool usable = grad.defined() && !grad.is_sparse() && grad.device().is_cpu() &&
                      grad.scalar_type() == at::kFloat && grad.sizes() == parameter.sizes() &&
                      grad.stride(-1) == 1;
  return usable ? grad : at::Tensor();
}

void check_kept_cast_and_buffer(const char* what, const at::Tensor& weight, at::ScalarType compute,
                                const at::Tensor& cast, const at::Tensor& buffer) {
  TANDEM_CHECK(!cast.defined() || (cast.scalar_type() == compute && cast.sizes() == weight.sizes()),
               "{}: the weight's kept cast must be {} [{}], got {} [{}]", what, c10::toString(compute),
               fmt::join(weight.sizes(), ", "), c10::toString(cast.scalar_type()), fmt::join(cast.sizes(), ", "));
  TANDEM_CHECK(!buffer.defined() || (buffer.scalar_type() == at::kFloat && buffer.sizes() == weight.sizes() &&
                                     buffer.device() == weight.device() && buffer.stride(-1) == 1),
               "{}: the weight's gradient buffer must be float32 [{}] on the weight's device with contiguous rows, "
               "got {} [{}]",
               what, fmt::join(weight.sizes(), ", "), c10::toString(buffer.scalar_type()), fmt::join(buffer.sizes(), ", "));
}

std::vector<at::Tensor> fused_linears(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                                      at::ScalarType compute, const std::vector<at::Tensor>& weights_in_compute,
                                      const std::vector<at::Tensor>& gradient_buffers) {
  TANDEM_CHECK(!weights.empty(), "fused_linears: no weights");
  TANDEM_CHECK(weights_in_compute.empty() || weights_in_compute.size() == weights.size(),
               "fused_linears: {} weights but {} kept casts", weights.size(), weights_in_compute.size());
  TANDEM_CHECK(gradient_buffers.empty() || gradient_buffers.size() == weights.size(),
               "fused_linears: {} weights but {} gradient buffers", weights.size(), gradient_buffers.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    const at::Tensor& weight = weights[i];
    TANDEM_CHECK(fused_linear_applies(x, weight, compute),
                 "fused_linear: float32 input, float32 or bfloat16 weight on the CPU, float32 or bfloat16 products; "
                 "got {} input, {} weight, {} products",
                 c10::toString(x.scalar_type()), c10::toString(weight.scalar_type()), c10::toString(compute));
    TANDEM_CHECK(x.dim() >= 1 && weight.dim() == 2 && weight.size(1) == x.size(-1),
                 "fused_linear: weight [{}] does not match the last dimension of x [{}]", fmt::join(weight.sizes(), ", "),
                 fmt::join(x.sizes(), ", "));
    check_kept_cast_and_buffer("fused_linear", weight, compute,
                               weights_in_compute.empty() ? at::Tensor() : weights_in_compute[i],
                               gradient_buffers.empty() ? at::Tensor() : gradient_buffers[i]);
  }
  const std::vector<at::Tensor> casts = weights_in_compute.empty() ? variable_list(weights.size()) : weights_in_compute;
  const std::vector<at::Tensor> buffers = gradient_buffers.empty() ? variable_list(weights.size()) : gradient_buffers;
  return FusedLinears::apply(x, at::TensorList(weights), casts, buffers, compute);
}

at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, at::ScalarType compute,
                        const at::Tensor& weight_in_compute) {
  return fused_linears(x, {weight}, compute, {weight_in_compute})[0];
}

}  // namespace tandem
