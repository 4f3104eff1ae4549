// Float64 references for verl's advantage estimators (grpo_vectorized, grpo_passk, opo,
// gpg, reinforce_plus_plus_baseline, remax) and policy losses (sapo, cispo, geo_mean, gpg,
// clip_cov, kl_cov), checked in tests/learner/test_objective_variants.cpp. Written from the
// definitions in learner/advantages.h and learner/policy_loss.h with plain loops over
// std::vector<double>, no at:: ops, on the random batches of objectives_reference.h.
#pragma once

#include "learner/policy_loss.h"
#include "tests/support/objectives_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tandem::testing {

using Flags = std::vector<std::vector<bool>>;  // [B][T]

// ---------------------------------------------------------------- advantage estimators
// Sequence-level estimators take r, the per-sample rewards with the token rewards already
// folded in (ref_sequence_rewards), and return one advantage per sample (ref_broadcast
// puts it on the valid tokens).

inline bool ref_group_all_equal(const Row& r, size_t start, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (r[start + i] != r[start]) return false;
  return true;
}

inline double ref_group_mean(const Row& r, size_t start, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += r[start + i];
  return sum / n;
}

// The group's variance with Bessel's correction (n - 1), as torch.std's square.
inline double ref_group_variance(const Row& r, size_t start, int64_t n) {
  const double mean = ref_group_mean(r, start, n);
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += (r[start + i] - mean) * (r[start + i] - mean);
  return squares / (n - 1);
}

// grpo_vectorized: verl's group_mean_std floors the variance at eps before the square
// root, so a group of nearly equal rewards divides by at least sqrt(eps), not by ~0.
inline Row ref_grpo_vectorized(const Row& r, int64_t n, bool normalize_std, double eps) {
  Row a(r.size(), 0.0);
  for (size_t start = 0; start < r.size(); start += n) {
    if (ref_group_all_equal(r, start, n)) continue;  // exactly 0
    const double mean = ref_group_mean(r, start, n);
    const double std = std::sqrt(std::max(ref_group_variance(r, start, n), eps));
    for (int64_t i = 0; i < n; ++i)
      a[start + i] = normalize_std ? (r[start + i] - mean) / (std + eps) : r[start + i] - mean;
  }
  return a;
}

// grpo_passk: the best sample of each group (the first of equal maxima) gets its margin
// over the runner-up (the largest of the others, so a tie for the best gives 0), divided
// by the group's Bessel std + eps when normalize_std; every other sample 0.
inline Row ref_grpo_passk(const Row& r, int64_t n, bool normalize_std, double eps) {
  Row a(r.size(), 0.0);
  for (size_t start = 0; start < r.size(); start += n) {
    size_t best = start;
    for (int64_t i = 1; i < n; ++i)
      if (r[start + i] > r[best]) best = start + i;  // strict: the first maximum stays
    double second = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i)
      if (start + i != best) second = std::max(second, r[start + i]);
    const double margin = r[best] - second;
    a[best] = normalize_std ? margin / (std::sqrt(ref_group_variance(r, start, n)) + eps) : margin;
  }
  return a;
}

inline Row ref_valid_counts(const Batch& x) {
  Row counts(x.rows(), 0.0);
  for (int64_t b = 0; b < x.rows(); ++b)
    for (bool v : x.valid[b]) counts[b] += v ? 1 : 0;
  return counts;
}

// opo: the baseline is the group's mean reward weighted by each sample's valid-token count.
inline Row ref_opo(const Batch& x, const Row& r) {
  const int64_t n = x.group_size;
  const Row lengths = ref_valid_counts(x);
  Row a(r.size(), 0.0);
  for (size_t start = 0; start < r.size(); start += n) {
    double weighted = 0, total = 0;
    for (int64_t i = 0; i < n; ++i) weighted += lengths[start + i] * r[start + i], total += lengths[start + i];
    // No valid token in the group: no baseline, and nowhere to put an advantage anyway.
    if (total == 0 || ref_group_all_equal(r, start, n)) continue;
    for (int64_t i = 0; i < n; ++i) a[start + i] = r[start + i] - weighted / total;
  }
  return a;
}

// gpg: the group-mean baseline scaled by alpha = B / (samples with a nonzero reward),
// counted over the whole batch.
inline Row ref_gpg(const Row& r, int64_t n) {
  double nonzero = 0;
  for (double v : r) nonzero += v != 0 ? 1 : 0;
  const double alpha = static_cast<double>(r.size()) / std::max(1.0, nonzero);
  Row a(r.size(), 0.0);
  for (size_t start = 0; start < r.size(); start += n) {
    if (ref_group_all_equal(r, start, n)) continue;
    const double mean = ref_group_mean(r, start, n);
    for (int64_t i = 0; i < n; ++i) a[start + i] = alpha * (r[start + i] - mean);
  }
  return a;
}

// reinforce_plus_plus_baseline: r - group mean on the valid tokens, whitened over the batch.
inline Matrix ref_reinforce_pp_baseline(const Batch& x, const Row& r, double eps) {
  return ref_whiten(x, ref_broadcast(x, ref_group_advantages(r, x.group_size, GroupBaseline::mean, eps)), eps);
}

// remax: undiscounted return-to-go of the token-level rewards minus the sample's greedy
// baseline, at the valid tokens.
inline Matrix ref_remax(const Batch& x, bool with_token_rewards, const Row& baselines) {
  const Matrix r = ref_token_level_rewards(x, with_token_rewards);
  Matrix a(x.rows(), Row(r[0].size(), 0.0));
  for (int64_t b = 0; b < x.rows(); ++b) {
    double to_go = 0;
    for (int64_t t = static_cast<int64_t>(r[b].size()) - 1; t >= 0; --t)
      if (x.valid[b][t]) {
        to_go += r[b][t];
        a[b][t] = to_go - baselines[b];
      }
  }
  return a;
}

// ---------------------------------------------------------------- policy losses
// Results in RefPolicy (objectives_reference.h): loss, ratio (1 at masked positions),
// grad = d loss[b][t] / d logprobs[b][t], clipped, bounded (no gradient: a log-ratio bound
// makes rho a constant) and near_bound (a decision within rounding of a bound, where
// float32 may decide otherwise: the tests skip those tokens' flags and gradients).

inline RefPolicy ref_policy_frame(const Batch& x) {
  const size_t T = x.valid[0].size();
  const Flags none(x.rows(), std::vector<bool>(T, false));
  return {Matrix(x.rows(), Row(T, 0.0)), Matrix(x.rows(), Row(T, 1.0)), Matrix(x.rows(), Row(T, 0.0)), none, none,
          none};
}

// A valid token's log-ratio x and ratio rho = exp(clamp(x, -20, 20)) (ppo_clip's bounds).
struct RefLogRatio {
  double x, rho;
  bool bounded;     // x outside [-20, 20]: rho is a constant
  bool near_bound;  // x within rounding of +-20
};

inline RefLogRatio ref_log_ratio(const Batch& x, int64_t b, size_t t) {
  const double d = x.logprobs[b][t] - x.old_logprobs[b][t];
  return {d, std::exp(std::min(std::max(d, kRefMinLogRatio), kRefPpoMaxLogRatio)),
          d < kRefMinLogRatio || d > kRefPpoMaxLogRatio,
          std::abs(d - kRefMinLogRatio) < 1e-4 || std::abs(d - kRefPpoMaxLogRatio) < 1e-4};
}

inline double ref_sigmoid(double z) { return 1 / (1 + std::exp(-z)); }

// sapo: loss = -(4 / tau) sigmoid(tau (rho - 1)) A, tau by the sign of A. d/dx of it is
// -A 4 s (1 - s) rho; 1 - s is taken as sigmoid(-z), which keeps its digits where s ~ 1.
inline RefPolicy ref_sapo(const Batch& x, const PolicyLossParams& p) {
  RefPolicy out = ref_policy_frame(x);
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < x.valid[b].size(); ++t) {
      if (!x.valid[b][t]) continue;
      const RefLogRatio lr = ref_log_ratio(x, b, t);
      const double a = x.advantages[b][t];
      const double tau = a > 0 ? p.tau_pos : p.tau_neg;
      const double z = tau * (lr.rho - 1);
      const double s = ref_sigmoid(z), one_minus_s = ref_sigmoid(-z);
      out.loss[b][t] = -(4 / tau) * s * a;
      out.ratio[b][t] = lr.rho;
      out.grad[b][t] = lr.bounded ? 0.0 : -a * 4 * s * one_minus_s * lr.rho;
      out.bounded[b][t] = lr.bounded;
      out.near_bound[b][t] = lr.near_bound;
    }
  return out;
}

// cispo: loss = -c A logprobs with c = clamp(rho, 1 - low, 1 + high) a constant: the
// gradient is -c A everywhere (so `bounded` stays false: a bound only fixes c).
inline RefPolicy ref_cispo(const Batch& x, const PolicyLossParams& p) {
  RefPolicy out = ref_policy_frame(x);
  const double low = 1 - p.clip_low, high = 1 + p.clip_high;
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < x.valid[b].size(); ++t) {
      if (!x.valid[b][t]) continue;
      const RefLogRatio lr = ref_log_ratio(x, b, t);
      const double a = x.advantages[b][t];
      const double c = std::min(std::max(lr.rho, low), high);
      out.loss[b][t] = -c * a * x.logprobs[b][t];
      out.ratio[b][t] = lr.rho;
      out.grad[b][t] = -c * a;
      out.clipped[b][t] = lr.rho < low || lr.rho > high;
      const double scale = 1e-4 * (1 + lr.rho);  // as ref_policy's
      out.near_bound[b][t] = std::abs(lr.rho - low) < scale || std::abs(lr.rho - high) < scale;
    }
  return out;
}

inline double ref_sign(double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0; }

// geo_mean: per row, L = -mean(A) exp(mean(l)) with l_t = sgn(A) min(sgn(A) x, sgn(A)
// clamp(x, -low, high)), i.e. x cut only on the side where the advantage would push the
// ratio on: above `high` for A > 0, below -low for A < 0. L sits at every valid token.
// `grad` here is the row's dL / d logprobs_t: exp(mean l) (-mean A) / n where l_t moves
// with x_t (uncut, A != 0), else 0; the test divides it by the number of rows with tokens
// (seq_mean_token_mean). x is not bounded at +-20: the tests keep log-ratios moderate.
// `ratio` is not defined for geo_mean (policy_loss.h), so it stays 1 and is not checked.
inline RefPolicy ref_geo_mean(const Batch& x, const PolicyLossParams& p) {
  RefPolicy out = ref_policy_frame(x);
  for (int64_t b = 0; b < x.rows(); ++b) {
    std::vector<size_t> tokens;
    for (size_t t = 0; t < x.valid[b].size(); ++t)
      if (x.valid[b][t]) tokens.push_back(t);
    if (tokens.empty()) continue;
    const double n = static_cast<double>(tokens.size());
    double advantage_sum = 0, l_sum = 0;
    std::vector<bool> moves;
    for (size_t t : tokens) {
      const double d = x.logprobs[b][t] - x.old_logprobs[b][t];
      const double a = x.advantages[b][t];
      const double s = ref_sign(a);
      const double l = s * std::min(s * d, s * std::min(std::max(d, -p.clip_low), p.clip_high));
      advantage_sum += a;
      l_sum += l;
      moves.push_back(s > 0 ? d <= p.clip_high : s < 0 ? d >= -p.clip_low : false);
      out.clipped[b][t] = d < -p.clip_low || d > p.clip_high;
      out.near_bound[b][t] = std::abs(d + p.clip_low) < 1e-4 || std::abs(d - p.clip_high) < 1e-4;
    }
    const double mean_advantage = advantage_sum / n, geometric = std::exp(l_sum / n);
    for (size_t k = 0; k < tokens.size(); ++k) {
      out.loss[b][tokens[k]] = -mean_advantage * geometric;
      out.grad[b][tokens[k]] = moves[k] ? -mean_advantage * geometric / n : 0.0;
    }
  }
  return out;
}

// gpg: plain policy gradient; `ratio` is not defined for it and stays 1.
inline RefPolicy ref_gpg_loss(const Batch& x) {
  RefPolicy out = ref_policy_frame(x);
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < x.valid[b].size(); ++t)
      if (x.valid[b][t]) {
        out.loss[b][t] = -x.advantages[b][t] * x.logprobs[b][t];
        out.grad[b][t] = -x.advantages[b][t];
      }
  return out;
}

// clip_cov, kl_cov: cov_t = (A_t - mean A)(logprobs_t - mean logprobs), the means over the
// batch's valid tokens; 0 at masked positions (never read there).
inline Matrix ref_covariance(const Batch& x) {
  double advantage_sum = 0, logprob_sum = 0, count = 0;
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < x.valid[b].size(); ++t)
      if (x.valid[b][t]) advantage_sum += x.advantages[b][t], logprob_sum += x.logprobs[b][t], count += 1;
  Matrix cov(x.rows(), Row(x.valid[0].size(), 0.0));
  if (count == 0) return cov;
  const double mean_advantage = advantage_sum / count, mean_logprob = logprob_sum / count;
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < x.valid[b].size(); ++t)
      if (x.valid[b][t]) cov[b][t] = (x.advantages[b][t] - mean_advantage) * (x.logprobs[b][t] - mean_logprob);
  return cov;
}

// How far an implementation's cov_t may be from the float64 one, so that a comparison
// with a window bound or another token's cov can go either way. Worst case: cov in
// float32, the means summed sequentially over N <= 320 tokens (20 rows x 16) with relative
// error N u ~ 1.9e-5 (u = 2^-24) of the summed magnitudes (|A| <~ 4, |logprobs| <= 3):
// <= 8e-5 per mean; times the other factor (|A - mean A| + |logprobs - mean| <~ 10) gives
// <= 8e-4, plus a few ulps of the product. 1e-3 covers it; an implementation in float64
// is far inside.
inline constexpr double kRefCovarianceMargin = 1e-3;

// How many tokens clip_cov and kl_cov single out: max(1, floor(cov_ratio * valid tokens)),
// never more than there are valid tokens (none in an all-masked batch).
inline int64_t ref_cov_count(const Batch& x, double cov_ratio) {
  double valid = 0;
  for (double n : ref_valid_counts(x)) valid += n;
  const auto k = static_cast<int64_t>(std::max(1.0, std::floor(cov_ratio * valid)));
  return std::min(k, static_cast<int64_t>(valid));
}

// clip_cov's candidates: valid tokens where ppo_clip (no dual clip) takes the unclipped
// branch and clip_cov_lb < cov_t < clip_cov_ub. `uncertain`: a candidate decision within
// rounding (a clip bound, or cov within kRefCovarianceMargin of a window bound).
struct RefClipCovCandidates {
  Flags candidate, uncertain;
};

inline RefClipCovCandidates ref_clip_cov_candidates(const Batch& x, const PolicyLossParams& p, const RefPolicy& ppo) {
  const Matrix cov = ref_covariance(x);
  const size_t T = x.valid[0].size();
  RefClipCovCandidates out{Flags(x.rows(), std::vector<bool>(T, false)), Flags(x.rows(), std::vector<bool>(T, false))};
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < T; ++t) {
      if (!x.valid[b][t]) continue;
      const double c = cov[b][t];
      out.candidate[b][t] = !ppo.clipped[b][t] && p.clip_cov_lb < c && c < p.clip_cov_ub;
      out.uncertain[b][t] = ppo.near_bound[b][t] || std::abs(c - p.clip_cov_lb) < kRefCovarianceMargin ||
                            std::abs(c - p.clip_cov_ub) < kRefCovarianceMargin;
    }
  return out;
}

// kl_cov with the singled-out tokens given (the test checks separately that they are the
// top-cov ones): loss -A rho everywhere (no clip), plus kl_cov_coef |x| on the chosen
// tokens, whose gradient gains kl_cov_coef sgn(x). |x| is taken unbounded: the tests that
// compare it keep log-ratios moderate, where clamping to +-20 changes nothing.
inline RefPolicy ref_kl_cov(const Batch& x, const PolicyLossParams& p, const Flags& chosen) {
  RefPolicy out = ref_policy_frame(x);
  for (int64_t b = 0; b < x.rows(); ++b)
    for (size_t t = 0; t < x.valid[b].size(); ++t) {
      if (!x.valid[b][t]) continue;
      const RefLogRatio lr = ref_log_ratio(x, b, t);
      const double a = x.advantages[b][t];
      out.loss[b][t] = -a * lr.rho;
      out.grad[b][t] = lr.bounded ? 0.0 : -a * lr.rho;
      out.ratio[b][t] = lr.rho;
      out.bounded[b][t] = lr.bounded && !chosen[b][t];  // a chosen token keeps the |x| term's gradient
      out.near_bound[b][t] = lr.near_bound;
      if (chosen[b][t]) {
        out.loss[b][t] += p.kl_cov_coef * std::abs(lr.x);
        out.grad[b][t] += p.kl_cov_coef * ref_sign(lr.x);
        out.clipped[b][t] = true;
      }
    }
  return out;
}

}  // namespace tandem::testing
