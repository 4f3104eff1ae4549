// The numbers one update reports about its objective, as plain doubles (measured over valid
// tokens only), and how the reports of micro-batches combine into the mini-batch's.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tandem {

struct ObjectiveMetrics {
  // Shares of the aggregated losses. With the mini-batch's AggregationScale they add up
  // over micro-batches to the mini-batch's loss (loss_aggregation.h).
  double loss = 0;        // total: pg_loss + kl_coef * kl_loss - entropy_coef * entropy_loss
  double pg_loss = 0;     // aggregated policy loss
  double value_loss = 0;  // aggregated critic loss (gae), 0.5 * squared error (value_loss.h)
  // Means over valid tokens.
  double kl = 0;          // KL estimate to the reference (the configured estimator); 0 without one
  double entropy = 0;     // policy entropy per token; 0 when not given
  double clipfrac = 0;    // fraction of tokens where a clip (ratio or dual) was active
  double approx_kl = 0;   // 0.5 * (logprobs - old_logprobs)^2: how far this update moved the policy
  double ratio_mean = 1;  // the clipped ratio (per token for ppo_clip, per sequence for gspo)
  double ratio_min = 1;
  double ratio_max = 1;
  double explained_variance = 0;  // critic (gae): 1 - Var(R - V) / Var(R)
  double tokens = 0;              // valid tokens measured: the weight when combining
  // Stale samples' tokens (TrainingSample::stale): sums of their importance weights and of
  // those cut to is_cap, and their count. Reported as async/is_weight_mean and
  // async/is_clipped_share when there are any.
  double is_weight_sum = 0;
  double is_clipped = 0;
  double is_tokens = 0;
  // The reward model (Trainer::preference_step): pairs scored right, and the sum of the
  // score margins s_chosen - s_rejected.
  double pairs_correct = 0;
  double margin_sum = 0;
};

// Adds `part` (another micro-batch or rank of the same objective: actor with actor, critic
// with critic) into `total`: loss shares add; means are
// weighted by tokens; min and max combine. explained_variance is token-weighted too, which
// is an approximation (the exact value needs the variances of the whole batch).
void accumulate(ObjectiveMetrics& total, const ObjectiveMetrics& part);

// ("actor/pg_loss", value), ... with the DESIGN.md metric names (actor/*, critic/*).
std::vector<std::pair<std::string, double>> metric_entries(const ObjectiveMetrics& metrics, bool with_critic);

}  // namespace tandem
