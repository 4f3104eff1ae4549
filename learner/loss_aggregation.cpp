#include "learner/loss_aggregation.h"

#include "core/error.h"
#include "learner/masked_ops.h"
#include "core/unknown_name.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace tandem {

namespace {

const std::vector<std::pair<std::string, LossAggregation>>& modes() {
  static const std::vector<std::pair<std::string, LossAggregation>> table = {
      {"token_mean", LossAggregation::token_mean},
      {"seq_mean_token_sum", LossAggregation::seq_mean_token_sum},
      {"seq_mean_token_mean", LossAggregation::seq_mean_token_mean},
      {"seq_mean_token_sum_norm", LossAggregation::seq_mean_token_sum_norm},
  };
  return table;
}

// 0 denominators only happen with nothing to sum; dividing by 1 then keeps 0, not NaN.
double safe_denominator(double d) { return d > 0 ? d : 1.0; }

}  // namespace

LossAggregation loss_aggregation_from_name(const std::string& name) {
  // verl spells the same modes with hyphens (token-mean, ...): accepted as they are.
  std::string ours = name;
  std::replace(ours.begin(), ours.end(), '-', '_');
  for (const auto& [known, mode] : modes()) {
    if (known == ours) return mode;
  }
  throw_unknown_name("loss aggregation (loss_agg)", name, loss_aggregation_names());
}

std::string loss_aggregation_name(LossAggregation mode) {
  for (const auto& [name, known] : modes()) {
    if (known == mode) return name;
  }
  throw Error("loss_aggregation_name: not a LossAggregation value");
}

std::vector<std::string> loss_aggregation_names() {
  std::vector<std::string> names;
  for (const auto& entry : modes()) names.push_back(entry.first);
  return names;
}

AggregationScale aggregation_scale(const at::Tensor& mask, double max_response_length) {
  at::Tensor valid = mask_to_bool(mask);
  at::Tensor per_row = valid.sum(1);  // [B] valid tokens per row
  at::Tensor counts = at::stack({per_row.sum(), per_row.gt(0).sum()}).to(at::kCPU);
  AggregationScale scale;
  scale.tokens = static_cast<double>(counts[0].item<int64_t>());
  scale.sequences = static_cast<double>(counts[1].item<int64_t>());
  scale.rows = static_cast<double>(mask.size(0));
  scale.max_response_length = max_response_length;
  return scale;
}

AggregationScale combine(const AggregationScale& a, const AggregationScale& b) {
  TANDEM_CHECK(a.max_response_length == b.max_response_length,
               "combining aggregation scales with different max_response_length ({} and {})",
               a.max_response_length, b.max_response_length);
  return {a.tokens + b.tokens, a.sequences + b.sequences, a.rows + b.rows, a.max_response_length};
}

at::Tensor aggregate_loss(const at::Tensor& loss, const at::Tensor& mask, LossAggregation mode,
                          const AggregationScale& scale) {
  at::Tensor valid = mask_to_bool(mask);
  check_token_tensor(loss, mask, "loss");
  at::Tensor masked = zero_invalid(loss, valid);  // [B, T]
  switch (mode) {
    case LossAggregation::token_mean:
      return masked.sum() / safe_denominator(scale.tokens);
    case LossAggregation::seq_mean_token_sum:
      return masked.sum() / safe_denominator(scale.sequences);
    case LossAggregation::seq_mean_token_mean: {
      // Empty rows have sum 0 over count 1: they add nothing.
      at::Tensor row_tokens = valid.sum(1).clamp_min(1).to(loss.scalar_type());  // [B]
      return (masked.sum(1) / row_tokens).sum() / safe_denominator(scale.sequences);
    }
    case LossAggregation::seq_mean_token_sum_norm:
      TANDEM_CHECK(scale.max_response_length > 0,
                   "seq_mean_token_sum_norm needs max_response_length > 0 (the constant normaliser), got {}",
                   scale.max_response_length);
      return masked.sum() / safe_denominator(scale.rows * scale.max_response_length);
  }
  throw Error("aggregate_loss: not a LossAggregation value");
}

at::Tensor aggregate_loss(const at::Tensor& loss, const at::Tensor& mask, LossAggregation mode,
                          double max_response_length) {
  return aggregate_loss(loss, mask, mode, aggregation_scale(mask, max_response_length));
}

}  // namespace tandem
