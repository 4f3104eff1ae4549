// Evaluation on data.val (experiment.eval_every, eval_before_train): eval.n responses per
// validation prompt at eval.temperature (0: greedy) from the rollout workers, scored by
// the run's rewards, as verl's validation does. Metrics:
//   val/reward/mean        the summed reward's mean over every response
//   val/<reward>           each reward's weighted mean (keys as reward/<name>)
//   val/accuracy           share of responses whose summed reward >= eval.correct_threshold
//   val/pass@<n>           share of prompts with at least one such response
//   val/response/length_mean, time/eval_s
// Every response goes to val_samples.jsonl (the samples.jsonl row format).
#include "controller/training_loop_impl.h"

#include "core/log.h"

#include <numeric>

namespace tandem::training {

MetricRow TrainingLoop::evaluate(int64_t step) {
  const Clock::time_point start = Clock::now();
  std::vector<size_t> rows(val_data_.rows.size());
  std::iota(rows.begin(), rows.end(), size_t{0});
  std::vector<Sample> samples = generate(step, val_prompt_ids_, EvalSampling{c_.eval.n, c_.eval.temperature});
  score(samples, rows, val_data_);

  const double n = static_cast<double>(samples.size());
  const std::vector<std::string> keys = reward_metric_keys(c_.reward);
  double total = 0, correct = 0, length = 0;
  std::vector<double> per_reward(c_.reward.size(), 0.0);
  std::vector<bool> prompt_solved(rows.size(), false);
  for (const Sample& s : samples) {
    total += s.reward;
    length += static_cast<double>(s.tokens.size());
    for (size_t r = 0; r < c_.reward.size(); ++r) per_reward[r] += c_.reward[r].weight * s.reward_results[r].score;
    if (s.reward >= c_.eval.correct_threshold) {
      correct += 1;
      prompt_solved[s.prompt_slot] = true;
    }
  }
  const double solved = static_cast<double>(std::count(prompt_solved.begin(), prompt_solved.end(), true));
  MetricRow row = {{"val/reward/mean", total / n}};
  for (size_t r = 0; r < keys.size(); ++r) row.emplace_back("val/" + keys[r].substr(7), per_reward[r] / n);
  row.insert(row.end(), {{"val/accuracy", correct / n},
                         {fmt::format("val/pass@{}", c_.eval.n), solved / static_cast<double>(rows.size())},
                         {"val/response/length_mean", length / n},
                         {"time/eval_s", seconds_since(start)}});
  std::vector<std::string> prompts;
  for (size_t r : rows) prompts.push_back(val_data_.prompt(r));
  for (const std::string& line : sample_log_rows(c_, step, samples, prompts, samples.size())) {
    val_samples_log_->write_line(line);
  }
  log::info("evaluation at step {}: reward {:.4f}, accuracy {:.4f} over {} responses to {} prompts", step, total / n,
            correct / n, samples.size(), rows.size());
  return row;
}

}  // namespace tandem::training
