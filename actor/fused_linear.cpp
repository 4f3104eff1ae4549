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

// The operands rounded to the compute dtype once and saved: backward reuses them.
class FusedLinear : public torch::autograd::Function<FusedLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            at::ScalarType compute) {
    const int64_t k = x.size(-1), n = weight.size(0);
    const at::Tensor rows = x.reshape({-1, k}).to(compute);
    const at::Tensor w = weight.to(compute);
    at::Tensor y = at::empty({rows.size(0), n}, x.options().dtype(at::kFloat));
    onednn_matmul(rows, w.t(), y);
    ctx->save_for_backward({rows, w});
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = n;
    return y.view(sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& rows = saved[0];
    const at::Tensor& w = saved[1];
    const int64_t n = w.size(0), k = w.size(1);
    const at::Tensor grad = grad_outputs[0].reshape({-1, n}).to(rows.scalar_type()).contiguous();
    at::Tensor dx, dweight;
    if (ctx->needs_input_grad(0)) {
      dx = at::empty({rows.size(0), k}, grad_outputs[0].options().dtype(at::kFloat));
      onednn_matmul(grad, w, dx);
      std::vector<int64_t> sizes = grad_outputs[0].sizes().vec();
      sizes.back() = k;
      dx = dx.view(sizes);
    }
    if (ctx->needs_input_grad(1)) {
      dweight = at::empty({n, k}, grad_outputs[0].options().dtype(at::kFloat));
      onednn_matmul(grad.t(), rows, dweight);
    }
    return {dx, dweight, at::Tensor()};
  }
};

}  // namespace

bool fused_linear_applies(const at::Tensor& x, const at::Tensor& weight, at::ScalarType compute) {
  const bool weight_type = weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kBFloat16;
  return onednn_available() && x.device().is_cpu() && weight.device().is_cpu() && x.scalar_type() == at::kFloat &&
         weight_type && (compute == at::kFloat || compute == at::kBFloat16);
}

at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& weight, at::ScalarType compute) {
  TANDEM_CHECK(fused_linear_applies(x, weight, compute),
               "fused_linear: float32 input, float32 or bfloat16 weight on the CPU, float32 or bfloat16 products; "
               "got {} input, {} weight, {} products",
               c10::toString(x.scalar_type()), c10::toString(weight.scalar_type()), c10::toString(compute));
  TANDEM_CHECK(x.dim() >= 1 && weight.dim() == 2 && weight.size(1) == x.size(-1),
               "fused_linear: weight [{}] does not match the last dimension of x [{}]", fmt::join(weight.sizes(), ", "),
               fmt::join(x.sizes(), ", "));
  return FusedLinear::apply(x, weight, compute);
}

}  // namespace tandem
