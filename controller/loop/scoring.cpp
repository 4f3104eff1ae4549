// Scoring a step's (or an evaluation's) samples with the run's rewards, on the scoring
// thread: C++, Python and HTTP rewards alike (rewards/scoring.h), each entry's
// on_error policy applied to the samples a reward could not score, one console line per
// reward and step for those, every full error in RUN_DIR/logs/reward_errors.log, and the
// per-step count of reward calls killed for running past timeout_s.
#include "controller/loop/training_loop_impl.h"

#include "core/log.h"
#include "core/text.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace tandem::training {

void TrainingLoop::begin_scoring(const std::vector<size_t>& rows, const Dataset& data) {
  if (!scoring_) scoring_ = std::make_unique<ScoringThread>(rewards_);
  std::vector<const std::string*> slot_prompts;
  std::vector<const DataRow*> slot_rows;
  for (size_t row : rows) {
    slot_prompts.push_back(&data.prompt(row));
    slot_rows.push_back(&data.rows[row]);
  }
  scoring_->begin(std::move(slot_prompts), std::move(slot_rows));
}

std::map<std::pair<size_t, int64_t>, ScoredSample> TrainingLoop::finish_scoring() {
  // Failures seen meanwhile are recorded by the pool and reported by the next command.
  while (!scoring_->wait_idle_for(0.02)) pool_.poll_events(0.05);
  return scoring_->finish();
}

int64_t TrainingLoop::new_reward_timeouts() {
  int64_t total = 0;
  for (const auto& reward : rewards_) total += reward->timeouts();
  const int64_t since = total - reward_timeouts_counted_;
  reward_timeouts_counted_ = total;
  return since;
}

std::string TrainingLoop::record_reward_errors(const std::string& reward, const std::vector<std::string>& problems) {
  const std::string path = run_dir_ + "/logs/reward_errors.log";
  std::ofstream out(path, std::ios::app);
  for (const std::string& problem : problems) out << "reward " << reward << " " << problem << "\n\n";
  out.flush();
  if (!out) log::warn("cannot append to {}: {}", path, std::strerror(errno));
  return path;
}

namespace {

// The line of an error that says what went wrong: a Python traceback's last line (the
// exception), else the first.
std::string error_summary(const std::string& error) {
  std::vector<std::string> lines;
  for (const std::string& line : split(error, '\n')) {
    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
  }
  if (lines.empty()) return error;
  return lines.front().rfind("Traceback", 0) == 0 ? lines.back() : lines.front();
}

}  // namespace

std::string TrainingLoop::decode_response(const std::vector<int32_t>& tokens) const {
  std::vector<int32_t> text_ids;
  for (int32_t id : tokens) {
    bool eos = false;
    for (int64_t e : model_.eos_token_ids) eos = eos || id == e;
    if (!eos) text_ids.push_back(id);
  }
  return tokenizer_->decode(text_ids);
}

int64_t TrainingLoop::score(std::vector<Sample>& samples, const std::vector<size_t>& rows, const Dataset& data,
                            std::map<std::pair<size_t, int64_t>, ScoredSample>* early) {
  // outcomes[i][r]: sample i's outcome under reward r, from `early` where it has the
  // sample, else scored here, every such sample at once per reward.
  std::vector<std::vector<RewardOutcome>> outcomes(samples.size());
  std::vector<size_t> now;  // the samples to score here
  for (size_t i = 0; i < samples.size(); ++i) {
    Sample& s = samples[i];
    s.reward = 0;
    s.reward_results.assign(rewards_.size(), RewardResult{});
    if (early) {
      auto found = early->find({s.prompt_slot, s.sample_index});
      if (found != early->end() && found->second.tokens == s.tokens && found->second.outcomes.size() == rewards_.size()) {
        s.text = std::move(found->second.text);
        outcomes[i] = std::move(found->second.outcomes);
        continue;
      }
    }
    s.text = decode_response(s.tokens);
    now.push_back(i);
  }
  if (!now.empty()) {
    // On the scoring thread, while this one keeps the workers' heartbeats going.
    begin_scoring(rows, data);
    std::vector<ScoredSample> batch;
    for (size_t i : now) batch.push_back({samples[i].prompt_slot, samples[i].sample_index, samples[i].tokens, samples[i].text, {}});
    scoring_->submit(std::move(batch));
    std::map<std::pair<size_t, int64_t>, ScoredSample> scored = finish_scoring();
    for (size_t i : now) outcomes[i] = std::move(scored.at({samples[i].prompt_slot, samples[i].sample_index}).outcomes);
  }

  int64_t fallbacks = 0;
  for (size_t r = 0; r < rewards_.size(); ++r) {
    const RewardConfig& rc = c_.reward[r];
    const std::string what = rc.name + (rc.plugin.empty() ? "" : " (plugin " + rc.plugin + ")") +
                             (rc.python.empty() ? "" : " (" + rc.python + ")") +
                             (rc.http.empty() ? "" : " (" + rc.http + ")");
    std::vector<std::string> fallback_problems;
    std::string first_fallback;
    for (size_t i = 0; i < samples.size(); ++i) {
      Sample& s = samples[i];
      RewardResult result = outcomes[i][r].result;
      if (!outcomes[i][r].error.empty()) {
        const std::string problem = fmt::format("failed on sample {} (prompt {}): {}", i,
                                                quoted(data.prompt(rows[s.prompt_slot])), outcomes[i][r].error);
        if (rc.on_error != "fallback") {
          throw Error(fmt::format("reward {} {} (reward.{}.on_error: fallback would score it reward.{}.fallback_score "
                                  "instead)",
                                  what, problem, r, r));
        }
        if (fallback_problems.empty()) first_fallback = fmt::format("sample {}: {}", i, error_summary(outcomes[i][r].error));
        fallback_problems.push_back(problem);
        result = {rc.fallback_score, {}};
        ++fallbacks;
      }
      s.reward += rc.weight * result.score;
      s.reward_results[r] = std::move(result);
    }
    // One line per reward and step, not a traceback per sample: thousands at real batch sizes.
    if (!fallback_problems.empty()) {
      const std::string log_path = record_reward_errors(what, fallback_problems);
      log::warn("reward {}: {} of {} samples failed and scored {} (on_error: fallback); first: {}; every error in {}",
                what, fallback_problems.size(), samples.size(), rc.fallback_score, first_fallback, log_path);
    }
  }
  return fallbacks;
}

}  // namespace tandem::training
