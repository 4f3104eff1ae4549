// Evaluation on data.val (experiment.eval_every, eval_before_train): eval.n responses per
// validation prompt at eval.temperature (0: greedy) from the rollout workers, scored by
// the run's rewards, as verl's validation does. Metrics:
//   val/reward/mean        the summed reward's mean over every response
//   val/<reward>           each reward's weighted mean (keys as reward/<name>)
//   val/<reward>/<part>    the mean of each named part a reward returns
//   val/accuracy           share of responses whose summed reward >= eval.correct_threshold
//   val/pass@<n>           share of prompts with at least one such response
//   val/source/<data_source>/reward_mean, .../accuracy   the same, per the rows' data_source
//                          (when the rows name one), as verl splits validation by data source
//   val/response/length_mean, time/eval_s
// Every response goes to val_samples.jsonl (the samples.jsonl row format, with the row's
// ground truth and data_source), and one line per evaluation to the console.
#include "controller/loop/training_loop_impl.h"

#include "core/log.h"

#include <map>
#include <numeric>

namespace tandem::training {

MetricRow TrainingLoop::evaluate(int64_t step) {
  const Clock::time_point start = Clock::now();
  std::vector<size_t> rows(val_data_.rows.size());
  std::iota(rows.begin(), rows.end(), size_t{0});
  std::vector<Sample> samples = generate(step, rows, val_prompt_ids_, EvalSampling{c_.eval.n, c_.eval.temperature});
  scoring_.score(samples, rows, val_data_);

  const double n = static_cast<double>(samples.size());
  const std::vector<std::string> keys = reward_metric_keys(c_.reward);
  double total = 0, correct = 0, length = 0;
  std::vector<double> per_reward(c_.reward.size(), 0.0);
  std::map<std::string, std::pair<double, double>> part_sums;  // val/<reward>/<part> -> (sum, count)
  struct SourceSums {
    double reward = 0, correct = 0, count = 0;
  };
  std::map<std::string, SourceSums> by_source;  // data_source -> sums over its responses
  std::vector<bool> prompt_solved(rows.size(), false);
  for (const Sample& s : samples) {
    total += s.reward;
    length += static_cast<double>(s.tokens.size());
    const bool is_correct = s.reward >= c_.eval.correct_threshold;
    for (size_t r = 0; r < c_.reward.size(); ++r) {
      per_reward[r] += c_.reward[r].weight * s.reward_results[r].score;
      for (const auto& [part, value] : s.reward_results[r].parts) {
        auto& sums = part_sums["val/" + keys[r].substr(7) + "/" + metric_name_part(part)];
        sums.first += value;
        sums.second += 1;
      }
    }
    if (is_correct) {
      correct += 1;
      prompt_solved[s.prompt_slot] = true;
    }
    const DataRow& data_row = val_data_.rows[rows[s.prompt_slot]];
    if (auto source = data_row.find("data_source"); source != data_row.end()) {
      SourceSums& sums = by_source[metric_name_part(source->second)];
      sums.reward += s.reward;
      sums.correct += is_correct ? 1 : 0;
      sums.count += 1;
    }
  }
  const double solved = static_cast<double>(std::count(prompt_solved.begin(), prompt_solved.end(), true));
  MetricRow row = {{"val/reward/mean", total / n}};
  for (size_t r = 0; r < keys.size(); ++r) row.emplace_back("val/" + keys[r].substr(7), per_reward[r] / n);
  for (const auto& [key, sums] : part_sums) row.emplace_back(key, sums.first / sums.second);
  for (const auto& [source, sums] : by_source) {
    row.emplace_back("val/source/" + source + "/reward_mean", sums.reward / sums.count);
    row.emplace_back("val/source/" + source + "/accuracy", sums.correct / sums.count);
  }
  row.insert(row.end(), {{"val/accuracy", correct / n},
                         {fmt::format("val/pass@{}", c_.eval.n), solved / static_cast<double>(rows.size())},
                         {"val/response/length_mean", length / n},
                         {"time/eval_s", seconds_since(start)}});
  for (const std::string& line : sample_log_rows(c_, step, samples, val_data_, rows, samples.size())) {
    val_samples_log_->write_line(line);
  }
  const std::string summary =
      fmt::format("validation at step {}: reward {:.4f}, accuracy {:.4f}, pass@{} {:.4f} over {} responses to {} "
                  "prompts (val_samples.jsonl)",
                  step, total / n, correct / n, c_.eval.n, solved / static_cast<double>(rows.size()), samples.size(),
                  rows.size());
  log::info("{}", summary);
  if (c_.logging.console != "quiet") {
    if (progress_) {
      progress_->note("tandem: " + summary);
    } else {
      std::fprintf(stderr, "tandem: %s\n", summary.c_str());
    }
  }
  return row;
}

}  // namespace tandem::training
