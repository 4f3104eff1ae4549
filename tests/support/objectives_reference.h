// Float64 references for the learner's objectives (tests/learner/test_objectives.cpp and
// test_actor_critic_objectives.cpp), written from the definitions with plain loops over
// std::vector<double>, no at:: ops, plus the random ragged batches they are compared on.
#pragma once

#include "learner/kl.h"
#include "learner/loss_aggregation.h"
#include "learner/policy_loss.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace tandem::testing {

using Row = std::vector<double>;
using Matrix = std::vector<Row>;  // [B][T]
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

// A random batch shaped like the learner's: groups of consecutive samples, ragged masks
// (prompt prefix, response, padding, sometimes a hole), at least one all-masked row, one
// group of equal rewards, and NaN in every masked slot of every [B, T] input.
struct Batch {
  int64_t group_size = 0;
  std::vector<std::vector<bool>> valid;  // [B][T]
  Row rewards;                           // [B]
  Matrix logprobs, old_logprobs, ref_logprobs, advantages, token_rewards, values, old_values, entropy;
  int64_t rows() const { return static_cast<int64_t>(valid.size()); }
};

class Random {
 public:
  explicit Random(uint64_t seed) : gen_(seed) {}
  double normal(double sd = 1) { return std::normal_distribution<double>(0, sd)(gen_); }
  double uniform(double a, double b) { return std::uniform_real_distribution<double>(a, b)(gen_); }
  int64_t integer(int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(gen_); }
  bool chance(double p) { return uniform(0, 1) < p; }

 private:
  std::mt19937_64 gen_;
};

// Inputs are drawn as float32 values, so the float64 reference sees exactly what the
// float32 tensors hold and differences measure the computation alone.
inline double as_float(double x) { return static_cast<float>(x); }

inline Batch random_batch(Random& rng, int64_t groups, int64_t group_size, int64_t T) {
  Batch x;
  x.group_size = group_size;
  const int64_t B = groups * group_size;
  x.valid.assign(B, std::vector<bool>(T, false));
  const int64_t empty_row = rng.integer(0, B - 1);
  for (int64_t b = 0; b < B; ++b) {
    if (b == empty_row || rng.chance(0.05)) continue;
    const int64_t prompt = rng.integer(0, T / 3);
    const int64_t response = rng.integer(1, T - prompt);
    for (int64_t t = prompt; t < prompt + response; ++t) x.valid[b][t] = true;
    if (response > 2 && rng.chance(0.2)) x.valid[b][prompt + rng.integer(1, response - 2)] = false;
  }
  const int64_t equal_group = rng.integer(0, groups - 1);
  const double shared = rng.uniform(-1, 1);
  for (int64_t b = 0; b < B; ++b) {
    const bool binary = (b / group_size) % 2 == 0;
    x.rewards.push_back(b / group_size == equal_group ? as_float(shared)
                        : binary                     ? static_cast<double>(rng.integer(0, 1))
                                                     : as_float(rng.normal()));
  }
  auto fill = [&](auto draw) {
    Matrix m(B, Row(T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) m[b][t] = x.valid[b][t] ? as_float(draw(b, t)) : kNaN;
    return m;
  };
  x.logprobs = fill([&](int64_t, int64_t) { return -rng.uniform(0.05, 3.0); });
  // Log-ratios of sd 0.3: plenty of tokens on both sides of every clip bound.
  x.old_logprobs = fill([&](int64_t b, int64_t t) { return x.logprobs[b][t] + rng.normal(0.3); });
  x.ref_logprobs = fill([&](int64_t b, int64_t t) { return x.logprobs[b][t] + rng.normal(0.5); });
  x.advantages = fill([&](int64_t, int64_t) { return rng.normal(); });
  x.token_rewards = fill([&](int64_t, int64_t) { return rng.normal(0.1); });
  x.values = fill([&](int64_t, int64_t) { return rng.normal(); });
  x.old_values = fill([&](int64_t b, int64_t t) { return x.values[b][t] + rng.normal(0.3); });
  x.entropy = fill([&](int64_t, int64_t) { return rng.uniform(0.0, 4.0); });
  return x;
}

// ---------------------------------------------------------------- float64 references

inline Row ref_sequence_rewards(const Batch& x, bool with_token_rewards) {
  Row r = x.rewards;
  if (with_token_rewards)
    for (int64_t b = 0; b < x.rows(); ++b)
      for (size_t t = 0; t < x.valid[b].size(); ++t)
        if (x.valid[b][t]) r[b] += x.token_rewards[b][t];
  return r;
}

inline Matrix ref_broadcast(const Batch& x, const Row& per_sequence) {
  Matrix a(x.rows(), Row(x.valid[0].size(), 0.0));
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < a[b].size(); ++t)
      if (x.valid[b][t]) a[b][t] = per_sequence[b];
  return a;
}

enum class GroupBaseline { mean_over_std, mean, leave_one_out };

inline Row ref_group_advantages(const Row& r, int64_t n, GroupBaseline kind, double eps) {
  Row a(r.size());
  for (size_t start = 0; start < r.size(); start += n) {
    double sum = 0;
    bool all_equal = true;
    for (int64_t i = 0; i < n; ++i) {
      sum += r[start + i];
      all_equal = all_equal && r[start + i] == r[start];
    }
    const double mean = sum / n;
    double squares = 0;
    for (int64_t i = 0; i < n; ++i) squares += (r[start + i] - mean) * (r[start + i] - mean);
    const double std = std::sqrt(squares / (n - 1));  // Bessel's correction, as torch.std
    for (int64_t i = 0; i < n; ++i) {
      const double v = r[start + i];
      double adv = kind == GroupBaseline::leave_one_out ? v - (sum - v) / (n - 1) : v - mean;
      if (kind == GroupBaseline::mean_over_std) adv /= std + eps;
      a[start + i] = all_equal ? 0.0 : adv;
    }
  }
  return a;
}

// Token rewards with the sequence reward added at each row's last valid token.
inline Matrix ref_token_level_rewards(const Batch& x, bool with_token_rewards) {
  Matrix r(x.rows(), Row(x.valid[0].size(), 0.0));
  for (int64_t b = 0; b < x.rows(); ++b) {
    int64_t last = -1;
    for (size_t t = 0; t < r[b].size(); ++t) {
      if (!x.valid[b][t]) continue;
      last = static_cast<int64_t>(t);
      if (with_token_rewards) r[b][t] = x.token_rewards[b][t];
    }
    if (last >= 0) r[b][last] += x.rewards[b];
  }
  return r;
}

// (x - mean) / (population std + eps) over valid tokens; 0 if all valid values are equal.
inline Matrix ref_whiten(const Batch& x, const Matrix& m, double eps) {
  double sum = 0, count = 0;
  std::vector<double> seen;
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < m[b].size(); ++t)
      if (x.valid[b][t]) sum += m[b][t], count += 1, seen.push_back(m[b][t]);
  const double mean = count > 0 ? sum / count : 0;
  double squares = 0;
  for (double v : seen) squares += (v - mean) * (v - mean);
  const double std = count > 0 ? std::sqrt(squares / count) : 0;
  const bool all_equal = std::all_of(seen.begin(), seen.end(), [&](double v) { return v == seen[0]; });
  Matrix out(m.size(), Row(m[0].size(), 0.0));
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < m[b].size(); ++t)
      if (x.valid[b][t] && !all_equal) out[b][t] = (m[b][t] - mean) / (std + eps);
  return out;
}

inline Matrix ref_reinforce_pp(const Batch& x, bool with_token_rewards, double gamma, double eps) {
  Matrix r = ref_token_level_rewards(x, with_token_rewards);
  Matrix g(x.rows(), Row(r[0].size(), 0.0));
  for (int64_t b = 0; b < x.rows(); ++b) {
    double running = 0;
    for (int64_t t = static_cast<int64_t>(r[b].size()) - 1; t >= 0; --t)
      if (x.valid[b][t]) g[b][t] = running = r[b][t] + gamma * running;
  }
  return ref_whiten(x, g, eps);
}

struct RefGae {
  Matrix advantages, returns;
};

inline RefGae ref_gae(const Batch& x, bool with_token_rewards, double gamma, double lam, bool whiten, double eps) {
  Matrix r = ref_token_level_rewards(x, with_token_rewards);
  const size_t T = r[0].size();
  RefGae out{Matrix(x.rows(), Row(T, 0.0)), Matrix(x.rows(), Row(T, 0.0))};
  for (int64_t b = 0; b < x.rows(); ++b) {
    // The valid positions in order; the value after the last one is 0 (terminal).
    std::vector<size_t> steps;
    for (size_t t = 0; t < T; ++t)
      if (x.valid[b][t]) steps.push_back(t);
    double following = 0;
    for (size_t k = steps.size(); k-- > 0;) {
      const size_t t = steps[k];
      const double next_value = k + 1 < steps.size() ? x.values[b][steps[k + 1]] : 0.0;
      const double delta = r[b][t] + gamma * next_value - x.values[b][t];
      out.advantages[b][t] = following = delta + gamma * lam * following;
      out.returns[b][t] = out.advantages[b][t] + x.values[b][t];
    }
  }
  if (whiten) out.advantages = ref_whiten(x, out.advantages, eps);
  return out;
}

struct RefPolicy {
  Matrix loss, ratio, grad;          // grad: d loss[b][t] / d logprobs[b][t]
  std::vector<std::vector<bool>> clipped;
  std::vector<std::vector<bool>> bounded;     // a log-ratio bound is active: rho is a constant
  std::vector<std::vector<bool>> near_bound;  // the clip decision is within rounding of a bound
};

// The log-ratio bounds before exp() (verl's): ppo_clip [-20, 20] on log rho_t; gspo
// [-20, 10] on the per-token log-ratio, whose value is the sequence's mean log-ratio.
constexpr double kRefMinLogRatio = -20, kRefPpoMaxLogRatio = 20, kRefGspoMaxLogRatio = 10;

// Written from the objective side: J = min(rho A, clip(rho) A), dual: J = max(J, c A) for
// A < 0; loss = -J. `gspo` uses the sequence ratio (gradient s_i * d logprobs). Where the
// log-ratio is out of its bounds rho is the bound's exp, a constant: no gradient.
inline RefPolicy ref_policy(const Batch& x, const PolicyLossParams& p, bool gspo) {
  const size_t T = x.valid[0].size();
  auto flags = [&] { return std::vector<std::vector<bool>>(x.rows(), std::vector<bool>(T, false)); };
  RefPolicy out{Matrix(x.rows(), Row(T, 0.0)), Matrix(x.rows(), Row(T, 1.0)), Matrix(x.rows(), Row(T, 0.0)),
                flags(), flags(), flags()};
  const double max_log_ratio = gspo ? kRefGspoMaxLogRatio : kRefPpoMaxLogRatio;
  for (int64_t b = 0; b < x.rows(); ++b) {
    double sum = 0, count = 0;
    for (size_t t = 0; t < T; ++t)
      if (x.valid[b][t]) sum += x.logprobs[b][t] - x.old_logprobs[b][t], count += 1;
    const double sequence_log_ratio = count > 0 ? sum / count : 0.0;
    for (size_t t = 0; t < T; ++t) {
      if (!x.valid[b][t]) continue;
      const double log_rho = gspo ? sequence_log_ratio : x.logprobs[b][t] - x.old_logprobs[b][t];
      const bool bounded = log_rho < kRefMinLogRatio || log_rho > max_log_ratio;
      const double rho = std::exp(std::min(std::max(log_rho, kRefMinLogRatio), max_log_ratio));
      const double a = x.advantages[b][t];
      const double low = 1 - p.clip_low, high = 1 + p.clip_high;
      const double clipped_rho = std::min(std::max(rho, low), high);
      double objective = std::min(rho * a, clipped_rho * a);
      bool constant = clipped_rho * a < rho * a;
      if (p.dual_c > 0 && a < 0 && p.dual_c * a > objective) {
        objective = p.dual_c * a;
        constant = true;
      }
      out.loss[b][t] = -objective;
      out.ratio[b][t] = rho;
      out.clipped[b][t] = constant;
      out.bounded[b][t] = bounded;
      out.grad[b][t] = constant || bounded ? 0.0 : -a * rho;
      const double scale = 1e-4 * (1 + std::abs(rho));
      out.near_bound[b][t] = std::abs(rho - low) < scale || std::abs(rho - high) < scale ||
                             (p.dual_c > 0 && std::abs(rho - p.dual_c) < scale) ||
                             std::abs(log_rho - kRefMinLogRatio) < 1e-4 || std::abs(log_rho - max_log_ratio) < 1e-4;
    }
  }
  return out;
}

inline double ref_aggregate(const Batch& x, const Matrix& loss, LossAggregation mode, double max_length) {
  double total = 0, tokens = 0, sequences = 0, sequence_means = 0;
  for (int64_t b = 0; b < x.rows(); ++b) {
    double row_sum = 0, row_tokens = 0;
    for (size_t t = 0; t < loss[b].size(); ++t)
      if (x.valid[b][t]) row_sum += loss[b][t], row_tokens += 1;
    total += row_sum;
    tokens += row_tokens;
    if (row_tokens > 0) sequences += 1, sequence_means += row_sum / row_tokens;
  }
  switch (mode) {
    case LossAggregation::token_mean: return tokens > 0 ? total / tokens : 0;
    case LossAggregation::seq_mean_token_sum: return sequences > 0 ? total / sequences : 0;
    case LossAggregation::seq_mean_token_mean: return sequences > 0 ? sequence_means / sequences : 0;
    case LossAggregation::seq_mean_token_sum_norm: return total / (x.rows() * max_length);
  }
  return kNaN;
}

// One token's KL estimate from its log-ratio d = logprob - ref_logprob, and the estimate's
// derivative in logprob. k3 carries verl's bounds (low_var_kl): with c = clamp(d, -20, 20),
// min(exp(-c) - 1 + c, 10), a constant (no gradient) where either clamp is active. k1 and
// k2 have none.
struct RefKlToken {
  double value, grad;
  bool bounded;     // a bound is active: the value is 10 and the gradient 0
  bool near_bound;  // within rounding of a bound, where float32 may decide otherwise
};

inline RefKlToken ref_kl_token(double d, KlEstimator estimator) {
  if (estimator == KlEstimator::k1) return {d, 1.0, false, false};
  if (estimator == KlEstimator::k2) return {d * d / 2, d, false, false};
  const double c = std::min(std::max(d, -20.0), 20.0);
  const double k3 = std::exp(-c) - 1 + c;
  const bool bounded = c != d || k3 > 10;
  const bool near_bound = std::abs(std::abs(d) - 20) < 1e-4 || std::abs(k3 - 10) < 1e-4;
  return {std::min(k3, 10.0), bounded ? 0.0 : 1 - std::exp(-d), bounded, near_bound};
}

inline Matrix ref_kl(const Batch& x, KlEstimator estimator) {
  Matrix k(x.rows(), Row(x.valid[0].size(), 0.0));
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < k[b].size(); ++t)
      if (x.valid[b][t]) k[b][t] = ref_kl_token(x.logprobs[b][t] - x.ref_logprobs[b][t], estimator).value;
  return k;
}

inline double ref_masked_mean(const Batch& x, const Matrix& m) {
  double sum = 0, count = 0;
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < m[b].size(); ++t)
      if (x.valid[b][t]) sum += m[b][t], count += 1;
  return count > 0 ? sum / count : 0;
}

}  // namespace tandem::testing
