// The run's rewards applied to samples (step_scoring.h).
#include "controller/loop/step_scoring.h"

#include "controller/loop/training_loop_impl.h"  // metric_name_part
#include "core/error.h"
#include "core/log.h"
#include "core/text.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace tandem::training {

StepScoring::StepScoring(std::vector<std::unique_ptr<RewardScorer>> rewards, const Config& config, std::string run_dir,
                         std::shared_ptr<const Tokenizer> tokenizer, std::vector<int64_t> eos_token_ids,
                         std::function<void()> keep_alive)
    : rewards_(std::move(rewards)),
      configs_(config.reward),
      run_dir_(std::move(run_dir)),
      tokenizer_(std::move(tokenizer)),
      eos_token_ids_(std::move(eos_token_ids)),
      keep_alive_(std::move(keep_alive)) {}

StepScoring::~StepScoring() = default;

void StepScoring::open_reward_logs() {
  for (size_t r = 0; r < rewards_.size(); ++r) {
    rewards_[r]->start(run_dir_);
    if (!configs_[r].python.empty()) {
      rewards_[r]->set_log_path(fmt::format("{}/logs/reward-{}-{}.log", run_dir_, r, metric_name_part(configs_[r].name)));
    }
  }
}

void StepScoring::begin_early(const std::vector<size_t>& rows, const Dataset& data) {
  if (!thread_) thread_ = std::make_unique<ScoringThread>(rewards_);
  std::vector<const std::string*> slot_prompts;
  std::vector<const DataRow*> slot_rows;
  for (size_t row : rows) {
    slot_prompts.push_back(&data.prompt(row));
    slot_rows.push_back(&data.rows[row]);
  }
  thread_->begin(std::move(slot_prompts), std::move(slot_rows));
}

EarlyScores StepScoring::finish_early() {
  // Failures seen meanwhile are recorded by the pool and reported by the next command.
  while (!thread_->wait_idle_for(0.02)) keep_alive_();
  return thread_->finish();
}

void StepScoring::score_early(const std::vector<Sample>& finished) {
  std::vector<ScoredSample> batch;
  for (const Sample& s : finished) batch.push_back({s.prompt_slot, s.sample_index, s.tokens, decode_response(s.tokens), {}, {}});
  thread_->submit(std::move(batch));
}

void StepScoring::drain_early() {
  if (thread_) thread_->wait_idle_for(1e9);
}

double StepScoring::busy_seconds() const { return thread_ ? thread_->busy_seconds() : 0.0; }

int64_t StepScoring::new_timeouts() {
  int64_t total = 0;
  for (const auto& reward : rewards_) total += reward->timeouts();
  const int64_t since = total - timeouts_counted_;
  timeouts_counted_ = total;
  return since;
}

std::string StepScoring::record_errors(const std::string& reward, const std::vector<std::string>& problems) {
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

std::string StepScoring::decode_response(const std::vector<int32_t>& tokens) const {
  std::vector<int32_t> text_ids;
  for (int32_t id : tokens) {
    bool eos = false;
    for (int64_t e : eos_token_ids_) eos = eos || id == e;
    if (!eos) text_ids.push_back(id);
  }
  return tokenizer_->decode(text_ids);
}

int64_t StepScoring::score(std::vector<Sample>& samples, const std::vector<size_t>& rows, const Dataset& data,
                           EarlyScores* early) {
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
    if (s.multi_turn) {  // the last assistant message is the answer; the conversation goes along
      const auto [first, last] = s.last_assistant;
      s.text = decode_response(std::vector<int32_t>(s.tokens.begin() + first, s.tokens.begin() + last));
    } else {
      s.text = decode_response(s.tokens);
    }
    now.push_back(i);
  }
  if (!now.empty()) {
    // On the scoring thread, while this one keeps the workers' heartbeats going.
    begin_early(rows, data);
    std::vector<ScoredSample> batch;
    for (size_t i : now) {
      batch.push_back({samples[i].prompt_slot, samples[i].sample_index, samples[i].tokens, samples[i].text, {},
                       samples[i].conversation});
    }
    thread_->submit(std::move(batch));
    EarlyScores scored = finish_early();
    for (size_t i : now) outcomes[i] = std::move(scored.at({samples[i].prompt_slot, samples[i].sample_index}).outcomes);
  }

  int64_t fallbacks = 0;
  for (size_t r = 0; r < rewards_.size(); ++r) {
    const RewardConfig& rc = configs_[r];
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
      const std::string log_path = record_errors(what, fallback_problems);
      log::warn("reward {}: {} of {} samples failed and scored {} (on_error: fallback); first: {}; every error in {}",
                what, fallback_problems.size(), samples.size(), rc.fallback_score, first_fallback, log_path);
    }
  }
  // An environment's rewards join the reward section's (issue 28: summed, unweighted).
  for (Sample& s : samples) s.reward += s.environment_reward;
  return fallbacks;
}

}  // namespace tandem::training
