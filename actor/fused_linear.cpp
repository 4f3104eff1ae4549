#include "actor/fused_linear.h"

#include "actor/onednn_matmul.h"
#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

namespace tandem {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The operands rounded to the compute dtype once and saved: backward reuses them. Inputs:
// x, then the n weights, then their n kept casts (undefined where none).
class FusedLinears : public torch::autograd::Function<FusedLinears> {
 public:
  // The weights go in as an at::TensorList: libtorch's Function takes its tensors as inputs
  // (gradient edges). The kept casts go in as a std::vector, an opaque argument: they take no
  // gradient, and libtorch 1.13 refuses an undefined tensor as an input.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights,
                               const std::vector<at::Tensor>& kept_casts, at::ScalarType compute) {
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
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& rows = saved[0];
    const size_t count = saved.size() - 1;
    const int64_t k = rows.size(1);
    // Inputs: x, the weights, then two that are not tensors (the kept casts, compute).
    variable_list grads(3 + count);
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

std::vector<at::Tensor> fused_linears(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                                      at::ScalarType compute, const std::vector<at::Tensor>& weights_in_compute) {
  TANDEM_CHECK(!weights.empty(), "fused_linears: no weights");
  TANDEM_CHECK(weights_in_compute.empty() || weights_in_compute.size() == weights.size(),
               "fused_linears: {} weights but {} kept casts", weights.size(), weights_in_compute.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    const at::Tensor& weight = weights[i];
    TANDEM_CHECK(fused_linear_applies(x, weight, compute),
                 "fused_linear: float32 input, float32 or bfloat16 weight on the CPU, float32 or bfloat16 products; "
                 "got {} input, {} weight, {} products",
                 c10::toString(x.scalar_type()), c10::toString(weight.scalar_type()), c10::toString(compute));
    TANDEM_CHECK(x.dim() >= 1 && weight.dim() == 2 && weight.size(1) == x.size(-1),
                 "fused_linear: weight [{}] does not match the last dimension of x [{}]", fmt::join(weight.sizes(), ", "),
                 fmt::join(x.sizes(), ", "));
    if (weights_in_compute.empty()) continue;
    const at::Tensor& cast = weights_in_compute[i];
    TANDEM_CHECK(!cast.defined() || (cast.scalar_type() == compute && cast.sizes() == weight.sizes()),
                 "fused_linear: the weight's kept cast must be {} [{}], got {} [{}]", c10::toString(compute),
                 fmt::join(weight.sizes(), ", "), c10::toString(cast.scalar_type()), fmt::join(cast.sizes(), ", "));
  }
  const std::vector<at::Tensor> casts = weights_in_compute.empty() ? variable_list(weights.size()) : weights_in_compute;
  return FusedLinears::apply(x, at::TensorList(weights), casts, compute);
}

at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, at::ScalarType compute,
                        const at::Tensor& weight_in_compute) {
  return fused_linears(x, {weight}, compute, {weight_in_compute})[0];
}

}  // namespace tandem
