// The reward model's objective (tandem train-rm): Bradley-Terry on preference pairs
// (Bradley & Terry 1952; the InstructGPT reward model, Ouyang et al. 2022). With scalar
// scores s_c of the chosen and s_r of the rejected answer to the same prompt,
//   P(chosen preferred) = sigmoid(s_c - s_r)
//   loss = -log sigmoid(s_c - s_r) = softplus(s_r - s_c)     (per pair)
// computed as softplus so that a margin of -100 costs 100, not inf, and +100 costs e^-100,
// not 0 - exp rounding. Accuracy counts pairs with s_c > s_r strictly (a tie is wrong: the
// model has not told them apart).
#pragma once

#include <ATen/core/Tensor.h>

namespace tandem {

struct PreferenceLoss {
  at::Tensor loss;   // scalar, differentiable: sum over these pairs / total_pairs
  double accuracy_sum = 0;  // pairs of these with s_c > s_r
  double margin_sum = 0;    // sum of s_c - s_r (float64)
};

// chosen [P], rejected [P]: the pairs' scores (differentiable). `total_pairs`: the pairs of
// the whole mini-batch over every rank and micro-batch, so that the shares' losses add up
// to the mean over all pairs (loss_aggregation.h's reasoning). total_pairs <= 0 is an Error.
PreferenceLoss preference_loss(const at::Tensor& chosen, const at::Tensor& rejected, double total_pairs);

}  // namespace tandem
