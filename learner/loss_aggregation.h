// How per-token losses [B, T] become the scalar that is differentiated (`algorithm.loss_agg`).
//
// Gradient accumulation and data parallelism split one mini-batch into micro-batches on
// several ranks. Averaging each micro-batch's mean would weight short and long
// micro-batches alike, so the denominators are taken over the whole mini-batch instead:
// compute an AggregationScale for the whole mini-batch (or sum the per-rank scales with
// an all-reduce), pass it to every micro-batch, and the micro-batch losses add up to
// exactly the full-batch loss (their gradients too).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace tandem {

enum class LossAggregation {
  token_mean,               // sum over valid tokens / number of valid tokens
  seq_mean_token_sum,       // per-sequence sum, mean over sequences with >= 1 valid token
  seq_mean_token_mean,      // per-sequence mean, mean over sequences with >= 1 valid token
  seq_mean_token_sum_norm,  // Dr.GRPO: sum over valid tokens / (all rows B * max_response_length)
};

// "token_mean" → LossAggregation::token_mean; an unknown name is an Error listing the
// names, with a did-you-mean.
LossAggregation loss_aggregation_from_name(const std::string& name);
std::string loss_aggregation_name(LossAggregation mode);
std::vector<std::string> loss_aggregation_names();

// The denominators of every aggregation mode, counted over a whole mini-batch.
// Counts are doubles so that they all-reduce as one float64 tensor.
struct AggregationScale {
  double tokens = 0;               // valid tokens
  double sequences = 0;            // rows with at least one valid token (empty rows are excluded)
  double rows = 0;                 // all rows, empty ones included (Dr.GRPO's B)
  double max_response_length = 0;  // Dr.GRPO's constant normaliser, in tokens; 0: not set
};

// Counts of `mask` [B, T]. `max_response_length` is only needed by seq_mean_token_sum_norm
// (normally rollout.max_new_tokens).
AggregationScale aggregation_scale(const at::Tensor& mask, double max_response_length = 0);

// Scales of two disjoint parts of a batch (micro-batches, ranks): the counts add; the
// max_response_length must agree.
AggregationScale combine(const AggregationScale& a, const AggregationScale& b);

// loss [B, T] (autograd flows through), mask [B, T] → scalar: this batch's share of the
// aggregate over the batch that `scale` counts. With scale = aggregation_scale(mask) it is
// the plain aggregate of this batch. A zero denominator gives 0, never NaN.
at::Tensor aggregate_loss(const at::Tensor& loss, const at::Tensor& mask, LossAggregation mode,
                          const AggregationScale& scale);

// The plain aggregate of this batch alone.
at::Tensor aggregate_loss(const at::Tensor& loss, const at::Tensor& mask, LossAggregation mode,
                          double max_response_length = 0);

}  // namespace tandem
