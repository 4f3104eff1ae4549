// The step's rewards after scoring: DAPO's soft overlong punishment (algorithm.overlong) and
// dynamic sampling (algorithm.filter_groups), which drops groups that teach nothing and
// generates more prompts in their place.
#include "controller/loop/training_loop_impl.h"

#include "core/log.h"

#include <algorithm>

namespace tandem::training {

double overlong_penalty(const Config& c, const Sample& sample) {
  const OverlongConfig& o = c.algorithm.overlong;
  if (o.buffer_len <= 0) return 0.0;
  const int64_t limit = c.multi_turn() ? c.rollout.multi_turn.max_total_tokens : c.rollout.max_new_tokens;
  const double past = static_cast<double>(static_cast<int64_t>(sample.tokens.size()) - (limit - o.buffer_len));
  return std::min(0.0, -past / static_cast<double>(o.buffer_len) * o.penalty_factor);
}

TrainingLoop::RoundScores TrainingLoop::score_round(StepRollout& rollout) {
  RoundScores out;
  const Clock::time_point start = Clock::now();
  EarlyScores early_scores;
  if (rollout.scored_early) {
    early_scores = scoring_.finish_early();
    // Scoring time that ran under generation: what the thread spent, less what it spent
    // after generation ended (while this thread waited for it).
    out.hidden_reward_s = std::max(0.0, scoring_.busy_seconds() - seconds_since(start));
  }
  out.fallbacks = scoring_.score(rollout.samples, rollout.rows, data_, &early_scores);
  for (Sample& s : rollout.samples) s.reward += overlong_penalty(c_, s);
  out.reward_s = seconds_since(start);
  return out;
}

namespace {

// Whether a group's samples differ in the filter's metric (and so carry a learning signal).
bool informative(const Config& c, const std::vector<Sample>& samples, size_t begin, size_t end) {
  auto value = [&](const Sample& s) {
    // Accuracy is the answer's, before the overlong penalty (which the reward includes).
    const bool correct = s.reward - overlong_penalty(c, s) >= c.eval.correct_threshold;
    return c.algorithm.filter_groups.metric == "acc" ? (correct ? 1.0 : 0.0) : s.reward;
  };
  for (size_t i = begin + 1; i < end; ++i) {
    if (value(samples[i]) != value(samples[begin])) return true;
  }
  return false;
}

}  // namespace

MetricRow TrainingLoop::keep_informative_groups(int64_t step, StepRollout& rollout, RoundScores& scores,
                                                double& rollout_s) {
  const size_t group = static_cast<size_t>(c_.algorithm.group_size);
  const size_t wanted = static_cast<size_t>(c_.data.batch_size);
  const int64_t max_rounds = c_.algorithm.filter_groups.max_batches;
  StepRollout kept;
  kept.step = step;
  kept.prefill = rollout.prefill;
  int64_t dropped = 0, rounds = 1;
  // Moves the informative groups of `from` into `kept` (until it is full), renumbering
  // their prompt slots.
  auto take = [&](StepRollout& from) {
    for (size_t p = 0; p < from.prompts.size() && kept.prompts.size() < wanted; ++p) {
      if (!informative(c_, from.samples, p * group, (p + 1) * group)) {
        ++dropped;
        continue;
      }
      const size_t slot = kept.prompts.size();
      kept.prompts.push_back(from.prompts[p]);
      kept.rows.push_back(from.rows[p]);
      for (size_t i = p * group; i < (p + 1) * group; ++i) {
        Sample s = from.samples[i];
        s.prompt_slot = slot;
        kept.samples.push_back(std::move(s));
      }
    }
  };
  take(rollout);
  while (kept.prompts.size() < wanted && rounds < max_rounds) {
    generation_round_ = rounds++;
    const Clock::time_point start = Clock::now();
    StepRollout more;
    try {
      more = rollout_now(step);
    } catch (...) {
      generation_round_ = 0;
      throw;
    }
    generation_round_ = 0;
    rollout_s += seconds_since(start);
    const RoundScores round = score_round(more);
    scores.fallbacks += round.fallbacks;
    scores.reward_s += round.reward_s;
    scores.hidden_reward_s += round.hidden_reward_s;
    kept.prefill.computed += more.prefill.computed;
    kept.prefill.saved += more.prefill.saved;
    kept.prefill.session_reused += more.prefill.session_reused;
    kept.prefill.evicted_sessions += more.prefill.evicted_sessions;
    kept.prefill.pinned_blocks_max = std::max(kept.prefill.pinned_blocks_max, more.prefill.pinned_blocks_max);
    take(more);
  }
  if (kept.prompts.empty()) {
    log::warn("step {}: every group of {} generation rounds scored alike (algorithm.filter_groups.metric {}); "
              "training on the first round's {} groups as they are",
              step, rounds, c_.algorithm.filter_groups.metric, rollout.prompts.size());
  } else {
    if (kept.prompts.size() < wanted) {
      log::warn("step {}: {} of {} groups differ in {} after {} generation rounds "
                "(algorithm.filter_groups.max_batches); training on those",
                step, kept.prompts.size(), wanted, c_.algorithm.filter_groups.metric, rounds);
    }
    kept.prefetched = rollout.prefetched;
    rollout = std::move(kept);
  }
  return {{"data/filtered_groups", static_cast<double>(dropped)}, {"data/generation_rounds", static_cast<double>(rounds)}};
}

}  // namespace tandem::training
