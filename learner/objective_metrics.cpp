#include "learner/objective_metrics.h"

#include <algorithm>

namespace tandem {

void accumulate(ObjectiveMetrics& total, const ObjectiveMetrics& part) {
  total.loss += part.loss;
  total.pg_loss += part.pg_loss;
  total.value_loss += part.value_loss;
  total.is_weight_sum += part.is_weight_sum;
  total.is_clipped += part.is_clipped;
  total.is_tokens += part.is_tokens;
  total.pairs_correct += part.pairs_correct;
  total.margin_sum += part.margin_sum;
  if (part.tokens <= 0) return;
  const double weight_total = total.tokens / (total.tokens + part.tokens);
  const double weight_part = part.tokens / (total.tokens + part.tokens);
  auto mean = [&](double& into, double value) { into = weight_total * into + weight_part * value; };
  mean(total.kl, part.kl);
  mean(total.entropy, part.entropy);
  mean(total.clipfrac, part.clipfrac);
  mean(total.approx_kl, part.approx_kl);
  mean(total.ratio_mean, part.ratio_mean);
  mean(total.explained_variance, part.explained_variance);
  const bool first = total.tokens <= 0;
  total.ratio_min = first ? part.ratio_min : std::min(total.ratio_min, part.ratio_min);
  total.ratio_max = first ? part.ratio_max : std::max(total.ratio_max, part.ratio_max);
  total.tokens += part.tokens;
}

std::vector<std::pair<std::string, double>> metric_entries(const ObjectiveMetrics& m, bool with_critic) {
  std::vector<std::pair<std::string, double>> entries = {
      {"actor/loss", m.loss},           {"actor/pg_loss", m.pg_loss},       {"actor/kl", m.kl},
      {"actor/entropy", m.entropy},     {"actor/clipfrac", m.clipfrac},     {"actor/approx_kl", m.approx_kl},
      {"actor/ratio_mean", m.ratio_mean}, {"actor/ratio_min", m.ratio_min}, {"actor/ratio_max", m.ratio_max},
  };
  if (m.is_tokens > 0) {
    entries.emplace_back("async/is_weight_mean", m.is_weight_sum / m.is_tokens);
    entries.emplace_back("async/is_clipped_share", m.is_clipped / m.is_tokens);
  }
  if (with_critic) {
    entries.emplace_back("critic/value_loss", m.value_loss);
    entries.emplace_back("critic/explained_variance", m.explained_variance);
  }
  return entries;
}

}  // namespace tandem
