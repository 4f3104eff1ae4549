// tandem train-rm's step (TrainingLoop in reward-model mode): the learners train a
// Bradley-Terry reward model (learner/trainer.h, preference_step) on preference pairs, and
// score the validation pairs. Everything else (workers, checkpoints, snapshots, recovery,
// metrics, TensorBoard, the export) is the run's own machinery.
#include "controller/loop/training_loop_impl.h"

#include "controller/workers/learner_client.h"
#include "core/log.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

namespace tandem::training {

namespace {

// A pair's two sequences as training samples: the prompt's tokens, then the answer's.
void append_pair(const PreferencePair& pair, std::vector<TrainingSample>& out) {
  for (const std::vector<int32_t>* sequence : {&pair.chosen, &pair.rejected}) {
    TrainingSample s;
    s.prompt.assign(sequence->begin(), sequence->begin() + pair.prompt_tokens);
    s.response.assign(sequence->begin() + pair.prompt_tokens, sequence->end());
    s.old_logprobs.assign(s.response.size(), 0.0f);  // the codec wants every per-token field sized
    s.advantages.assign(s.response.size(), 0.0f);
    out.push_back(std::move(s));
  }
}

// -log sigmoid(m) in float64 without overflow.
double pair_loss(double margin) { return margin > 0 ? std::log1p(std::exp(-margin)) : -margin + std::log1p(std::exp(margin)); }

struct ScoreStatistics {
  double mean = 0, std = 0;
};

// The mean and (population) standard deviation of the scores, in float64, two passes.
ScoreStatistics score_statistics(const std::vector<float>& scores) {
  ScoreStatistics s;
  if (scores.empty()) return s;
  for (float x : scores) s.mean += x;
  s.mean /= static_cast<double>(scores.size());
  double squares = 0;
  for (float x : scores) squares += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(squares / static_cast<double>(scores.size()));
  return s;
}

}  // namespace

std::vector<std::vector<TrainingSample>> TrainingLoop::pair_shares(const PreferenceSet& set,
                                                                    const std::vector<size_t>& indices) const {
  const size_t ranks = static_cast<size_t>(c_.learner.workers);
  std::vector<std::vector<TrainingSample>> shares(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t i = indices.size() * r / ranks; i < indices.size() * (r + 1) / ranks; ++i) {
      append_pair(set.pairs.at(indices[i]), shares[r]);
    }
  }
  return shares;
}

void TrainingLoop::run_reward_model_step(int64_t step) {
  const Clock::time_point start = Clock::now();
  const std::vector<size_t> indices = order_->next(static_cast<size_t>(c_.reward_model.batch_size));
  const std::vector<std::vector<TrainingSample>> shares = pair_shares(*rm_train_, indices);
  finish_snapshot();  // the step before's, written meanwhile
  std::vector<Request> requests;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    learner_client::BatchCommand batch = learner_client::batch_command({shares[static_cast<size_t>(r)]});
    requests.push_back(
        request(learner_worker(c_, r), "learner_preference_step", std::move(batch.body), std::move(batch.attachments)));
  }
  const learner_client::TrainResult result = learner_client::read_train(collect(std::move(requests)).at(0));
  const double step_s = seconds_since(start);
  MetricRow row = {{"step", static_cast<double>(step)}, {"weight_version", static_cast<double>(step)}};
  double loss = 0, accuracy = 0;
  for (const auto& [name, value] : result.metrics) {
    row.emplace_back(name, value);
    if (name == "rm/loss") loss = value;
    if (name == "rm/accuracy") accuracy = value;
  }
  row.insert(row.end(), {{"time/step_s", step_s}, {"time/train_s", step_s}, {"perf/worker_restarts", static_cast<double>(restarts_)}});
  const int64_t eval_every = c_.experiment.eval_every;
  if (eval_every > 0 && !rm_val_->pairs.empty() && (step % eval_every == 0 || step == c_.experiment.steps)) {
    const MetricRow val = evaluate_reward_model(step);
    row.insert(row.end(), val.begin(), val.end());
  }
  observers_->observe_workers(step, row);
  metrics_->write(row);
  observers_->publish_step(step, c_.experiment.steps, row);
  progress_->update(step, fmt::format("rm loss {:.4f}  accuracy {:.3f}", loss, accuracy));
  log::info("step {}: reward model loss {:.4f}, accuracy {:.3f}, step {:.2f}s", step, loss, accuracy, step_s);
}

std::vector<float> TrainingLoop::reward_model_val_scores() {
  finish_snapshot();  // every learner command waits for the step's snapshot (the export's too)
  std::vector<size_t> all(rm_val_->pairs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::vector<std::vector<TrainingSample>> shares = pair_shares(*rm_val_, all);
  std::vector<Request> requests;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    learner_client::BatchCommand batch = learner_client::batch_command({shares[static_cast<size_t>(r)]});
    requests.push_back(
        request(learner_worker(c_, r), "learner_reward_scores", std::move(batch.body), std::move(batch.attachments)));
  }
  const std::vector<CommandReply> replies = collect(std::move(requests));
  std::vector<float> scores;
  for (size_t r = 0; r < replies.size(); ++r) {
    TANDEM_CHECK(!replies[r].attachments.empty(), "learner_reward_scores reply: no frame");
    const std::string& frame = replies[r].attachments[0];
    TANDEM_CHECK(frame.size() == shares[r].size() * sizeof(float),
                 "learner_reward_scores reply: {} bytes for {} samples", frame.size(), shares[r].size());
    const size_t at = scores.size();
    scores.resize(at + shares[r].size());
    std::memcpy(scores.data() + at, frame.data(), frame.size());
  }
  return scores;
}

MetricRow TrainingLoop::evaluate_reward_model(int64_t step) {
  const Clock::time_point start = Clock::now();
  const std::vector<float> scores = reward_model_val_scores();
  double loss = 0, correct = 0, margin = 0, pairs = 0;
  for (size_t p = 0; p + 1 < scores.size(); p += 2) {
    const double m = static_cast<double>(scores[p]) - scores[p + 1];
    TANDEM_CHECK(std::isfinite(m), "step {}: a validation pair's score is not finite", step);
    loss += pair_loss(m);
    correct += m > 0 ? 1 : 0;
    margin += m;
    pairs += 1;
  }
  const ScoreStatistics stats = score_statistics(scores);
  const MetricRow row = {{"val/rm_loss", loss / pairs},
                         {"val/rm_accuracy", correct / pairs},
                         {"val/rm_margin", margin / pairs},
                         {"val/pairs", pairs},
                         {"val/rm_score_mean", stats.mean},
                         {"val/rm_score_std", stats.std},
                         {"time/eval_s", seconds_since(start)}};
  if (progress_) progress_->note(fmt::format("step {}: validation accuracy {:.3f}, loss {:.4f} ({} pairs)", step,
                                             correct / pairs, loss / pairs, pairs));
  return row;
}

std::string TrainingLoop::reward_model_export_config() {
  const ScoreStatistics stats = score_statistics(reward_model_val_scores());
  // The names OpenRLHF's reward models carry: a served model's `normalize` reads them.
  return nlohmann::json{{"mean", stats.mean}, {"std", stats.std}}.dump();
}

}  // namespace tandem::training
