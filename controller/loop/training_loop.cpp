#include "controller/loop/training_loop.h"
#include "controller/loop/training_loop_impl.h"

#include "controller/workers/learner_client.h"
#include "controller/workers/rollout_client.h"

#include "controller/run/run_dir.h"
#include "controller/run/run_status.h"

#include "actor/presets.h"
#include "core/files.h"
#include "core/log.h"
#include "core/net_address.h"
#include "core/signals.h"
#include "core/text.h"
#include "core/trace.h"
#include "learner/advantages.h"
#include "learner/objective_registry.h"
#include "weight_sync/reshard.h"
#include "weight_sync/shm.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

namespace tandem {

namespace training {

// `command` (learner_values, learner_logprobs, learner_probe_logprobs or learner_ref_logprobs) over every
// sample: each rank reads a contiguous share; one float per response token comes back.
std::vector<std::vector<float>> TrainingLoop::per_token_from_learners(const std::string& command,
                                                                      const std::vector<TrainingSample>& samples) {
  const size_t ranks = static_cast<size_t>(c_.learner.workers);
  std::vector<Request> requests;
  for (size_t r = 0; r < ranks; ++r) {
    std::vector<TrainingSample> share;
    const auto [begin, end] = learner_share(samples.size(), static_cast<int64_t>(r), c_.learner);
    for (size_t i = begin; i < end; ++i) {
      TrainingSample probe;  // tokens are what matters; the codec wants every per-token field sized
      probe.prompt = samples[i].prompt;
      probe.response = samples[i].response;
      probe.old_logprobs.assign(samples[i].response.size(), 0.0f);
      probe.advantages.assign(samples[i].response.size(), 0.0f);
      share.push_back(std::move(probe));
    }
    learner_client::BatchCommand batch = learner_client::batch_command({share});
    const WorkerId worker = learner_worker(c_, static_cast<int64_t>(r));
    requests.push_back(request(worker, command, std::move(batch.body), std::move(batch.attachments)));
  }
  const std::vector<CommandReply> replies = collect(std::move(requests));
  std::vector<std::vector<float>> out;
  const size_t tensor_ranks = static_cast<size_t>(std::max<int64_t>(1, c_.learner.tensor_parallel));
  for (size_t r = 0; r < ranks; r += tensor_ranks) {  // a replica's tensor-parallel ranks answer alike
    TANDEM_CHECK(!replies[r].attachments.empty(), "{} reply: no frame", command);
    const std::string& frame = replies[r].attachments[0];
    size_t offset = 0;
    const auto [begin, end] = learner_share(samples.size(), static_cast<int64_t>(r), c_.learner);
    for (size_t i = begin; i < end; ++i) {
      const size_t n = samples[i].response.size();
      TANDEM_CHECK((offset + n) * 4 <= frame.size(), "{} reply: frame too short", command);
      out.emplace_back(n);
      std::memcpy(out.back().data(), frame.data() + offset * 4, n * 4);
      offset += n;
    }
  }
  return out;
}

// The weight-sync probe: the rollout engine's log-probs of the samples it just drew must
// be the learner's for the same tokens: both hold weight version `version`.
// Returns the largest difference; above weight_sync.probe_tolerance is an Error.
double TrainingLoop::probe_logprobs(const std::vector<TrainingSample>& batch, int64_t version) {
  const size_t count = std::min<size_t>(batch.size(), 16);
  const std::vector<TrainingSample> probes(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(count));
  // In float32 whatever learner.precision: the probe checks the weights, not bf16 rounding.
  const std::vector<std::vector<float>> learner = per_token_from_learners("learner_probe_logprobs", probes);
  double worst = 0;
  for (size_t i = 0; i < count; ++i) {
    for (size_t t = 0; t < probes[i].old_logprobs.size(); ++t) {
      const double d = std::abs(static_cast<double>(learner[i][t]) - probes[i].old_logprobs[t]);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
  }
  if (!(worst <= c_.weight_sync.probe_tolerance)) {
    throw Error(fmt::format("weight-sync probe at version {}: the rollout engine's log-probs differ from the learner's "
                            "by up to {:.3g} (weight_sync.probe_tolerance {}): the rollout workers do not hold the "
                            "learner's weights",
                            version, worst, c_.weight_sync.probe_tolerance));
  }
  return worst;
}

TrainingLoop::TrainingLoop(WorkerPool& pool, const Config& config, RunInputs inputs, const std::string& run_dir)
    : pool_(pool),
      c_(config),
      run_dir_(run_dir),
      model_dir_(std::move(inputs.model_dir)),
      model_(std::move(inputs.model)),
      tokenizer_(std::move(inputs.tokenizer)),
      data_(std::move(inputs.data)),
      prompt_ids_(std::move(inputs.prompt_ids)),
      val_data_(std::move(inputs.val_data)),
      val_prompt_ids_(std::move(inputs.val_prompt_ids)),
      skipped_long_prompts_(inputs.skipped_long_prompts),
      scoring_(std::move(inputs.rewards), config, run_dir, tokenizer_, model_.eos_token_ids,
               [this] { pool_.poll_events(0.05); }) {
  turn_frames_ = std::move(inputs.turn_frames);
  rm_train_ = std::move(inputs.preference_train);
  rm_val_ = std::move(inputs.preference_val);
  environment_template_ = std::move(inputs.environment_template);
  environment_rows_ = std::move(inputs.environment_rows);
  val_environment_rows_ = std::move(inputs.val_environment_rows);
}

TrainingLoop::~TrainingLoop() = default;

void TrainingLoop::compute_advantages(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch,
                                      const ExtraAdvantageInputs& extra) {
  const int64_t count = static_cast<int64_t>(samples.size());
  int64_t longest = 1;
  for (const Sample& s : samples) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.tokens.size()));
  std::vector<float> rewards, mask(static_cast<size_t>(count * longest), 0.0f), values(mask.size(), 0.0f),
      token_rewards(extra.token_rewards.empty() ? 0 : mask.size(), 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    rewards.push_back(static_cast<float>(samples[i].reward));
    // Multi-turn: the tool messages between the policy's turns are no actions of its own.
    for (size_t t = 0; t < samples[i].tokens.size(); ++t) {
      mask[i * longest + t] = samples[i].loss_mask.empty() ? 1.0f : samples[i].loss_mask[t];
    }
    if (!batch[i].old_values.empty()) {
      for (size_t t = 0; t < samples[i].tokens.size(); ++t) values[i * longest + t] = batch[i].old_values[t];
    }
    if (!extra.token_rewards.empty()) {
      for (size_t t = 0; t < samples[i].tokens.size(); ++t) token_rewards[i * longest + t] = extra.token_rewards[i][t];
    }
  }
  AdvantageInputs in;
  in.rewards = at::tensor(rewards, at::kFloat);
  in.mask = at::tensor(mask, at::kFloat).view({count, longest});
  in.values = at::tensor(values, at::kFloat).view({count, longest});
  if (!token_rewards.empty()) in.token_rewards = at::tensor(token_rewards, at::kFloat).view({count, longest});
  if (!extra.baselines.empty()) in.baselines = at::tensor(extra.baselines, at::kDouble).to(at::kFloat);
  in.group_size = c_.algorithm.group_size;
  AdvantageParams params = advantage_params(c_.algorithm);
  const AdvantageResult result = find_advantage_estimator(c_.algorithm.advantage)(in, params);
  const at::Tensor advantages = result.advantages.to(at::kFloat).contiguous();
  const at::Tensor returns = result.returns.defined() ? result.returns.to(at::kFloat).contiguous() : at::Tensor();
  for (int64_t i = 0; i < count; ++i) {
    const float* a = advantages.data_ptr<float>() + i * longest;
    batch[i].advantages.assign(a, a + samples[i].tokens.size());
    if (returns.defined() && c_.algorithm.advantage == "gae") {
      const float* r = returns.data_ptr<float>() + i * longest;
      batch[i].returns.assign(r, r + samples[i].tokens.size());
    }
  }
}

// mini-batch m, rank r: contiguous shares (whole groups stay together when sizes divide).
std::vector<std::vector<std::vector<TrainingSample>>> TrainingLoop::rank_shares(
    const std::vector<TrainingSample>& batch) const {
  const size_t minis = static_cast<size_t>(c_.learner.mini_batches), ranks = static_cast<size_t>(c_.learner.workers);
  std::vector<std::vector<std::vector<TrainingSample>>> shares(ranks, std::vector<std::vector<TrainingSample>>(minis));
  for (size_t m = 0; m < minis; ++m) {
    const size_t begin = batch.size() * m / minis, end = batch.size() * (m + 1) / minis;
    for (size_t r = 0; r < ranks; ++r) {
      const auto [b_offset, e_offset] = learner_share(end - begin, static_cast<int64_t>(r), c_.learner);
      const size_t b = begin + b_offset, e = begin + e_offset;
      shares[r][m].assign(batch.begin() + static_cast<std::ptrdiff_t>(b), batch.begin() + static_cast<std::ptrdiff_t>(e));
    }
  }
  return shares;
}

// learner_train's result as the step's metrics read it: every UpdateMetrics entry by
// name, with the optimizer steps and tokens.
static nlohmann::json update_json(const learner_client::TrainResult& result) {
  nlohmann::json update = nlohmann::json::object();
  for (const auto& [name, value] : result.metrics) update[name] = value;
  update["optimizer_steps"] = result.optimizer_steps;
  update["tokens"] = result.tokens;
  return update;
}

nlohmann::json TrainingLoop::train(std::vector<TrainingSample>& batch, int64_t step) {
  const auto shares = rank_shares(batch);
  std::vector<Request> requests;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    learner_client::BatchCommand batch = learner_client::batch_command(shares[static_cast<size_t>(r)]);
    const WorkerId worker = learner_worker(c_, r);
    requests.push_back(request(worker, "learner_train", std::move(batch.body), std::move(batch.attachments)));
  }
  if (!prefetches_after(step)) return update_json(learner_client::read_train(collect(std::move(requests)).at(0)));
  // Asynchronous: the next step's rollout runs on the rollout workers' current weights
  // while the learners train.
  StepRollout next = next_prompts(step + 1);
  const int64_t first_version = weight_version_;
  const bool partial = c_.algorithm.async.partial_rollouts;
  std::vector<Request> rollout = rollout_requests(next.step, next.rows, next.prompts, std::nullopt, false, partial);
  send_now(requests);
  send_now(rollout);
  const nlohmann::json update = update_json(learner_client::read_train(wait_for(std::move(requests)).at(0)));
  // Partial rollouts: the new weights go out now, and samples still generating continue
  // on them (a rollout that has finished just loads them, as it would after this step).
  if (partial) sync_weights(step);
  next.samples = samples_from(wait_for(std::move(rollout)),
                              next.prompts.size() * static_cast<size_t>(c_.algorithm.group_size), first_version);
  next.prefill = last_prefill_;
  next.prefetched = true;
  prefetched_ = std::move(next);
  return update;
}

TrainingLoop::StepRollout TrainingLoop::next_prompts(int64_t step) {
  StepRollout out;
  out.step = step;
  out.rows = order_->next(static_cast<size_t>(c_.data.batch_size));
  for (size_t row : out.rows) out.prompts.push_back(prompt_ids_[row]);
  return out;
}

TrainingLoop::StepRollout TrainingLoop::rollout_now(int64_t step) {
  StepRollout out = next_prompts(step);
  // Samples that finish early are scored on another thread while the rest generate.
  out.scored_early = c_.rollout.score_while_generating;
  std::function<void(std::vector<Sample>&&)> on_early;
  if (out.scored_early) {
    scoring_.begin_early(out.rows, data_);
    on_early = [&](std::vector<Sample>&& finished) { scoring_.score_early(finished); };
  }
  try {
    out.samples = generate(step, out.rows, out.prompts, std::nullopt, on_early);
  } catch (...) {
    if (out.scored_early) scoring_.drain_early();  // nothing of this step is scored behind the recovery
    throw;
  }
  out.prefill = last_prefill_;  // before evaluation generates again
  return out;
}

void TrainingLoop::run_step(int64_t step) {
  if (traced(step)) begin_trace();
  const Clock::time_point step_start = Clock::now();
  // The controller's phases, spans of category "phase" in the step's trace.
  int64_t phase_start_us = trace::now_us();
  auto end_phase = [&phase_start_us](const char* name) {
    trace::record(name, "phase", phase_start_us);
    phase_start_us = trace::now_us();
  };
  // Generated now, or (asynchronous) during the previous step's training on the weights
  // the rollout workers held then.
  StepRollout rollout = prefetched_ && prefetched_->step == step ? std::move(*prefetched_) : rollout_now(step);
  prefetched_.reset();
  const bool prefetched = rollout.prefetched;
  double rollout_s = prefetched ? 0.0 : seconds_since(step_start);
  end_phase("rollout");

  RoundScores scores = score_round(rollout);
  MetricRow dynamic_sampling;
  if (!c_.algorithm.filter_groups.metric.empty()) dynamic_sampling = keep_informative_groups(step, rollout, scores, rollout_s);
  const std::vector<size_t>& rows = rollout.rows;
  const std::vector<std::vector<int32_t>>& prompts = rollout.prompts;
  const PrefillCounts& prefill = rollout.prefill;
  std::vector<Sample>& samples = rollout.samples;
  const int64_t fallbacks = scores.fallbacks;
  const double reward_s = scores.reward_s, hidden_reward_s = scores.hidden_reward_s;
  end_phase("reward");

  Clock::time_point t = Clock::now();
  std::vector<TrainingSample> batch(samples.size());
  int64_t response_tokens = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    // An environment's prompt is the sample's own (its reset() made it).
    batch[i].prompt = samples[i].prompt.empty() ? prompts[samples[i].prompt_slot] : samples[i].prompt;
    batch[i].response = samples[i].tokens;
    batch[i].old_logprobs = samples[i].logprobs;
    batch[i].loss_mask = samples[i].loss_mask;  // multi-turn: only the policy's tokens carry loss
    response_tokens += static_cast<int64_t>(samples[i].tokens.size());
  }
  finish_snapshot();  // the step before's, written while this step generated
  if (c_.algorithm.advantage == "gae") {
    std::vector<std::vector<float>> values = per_token_from_learners("learner_values", batch);
    for (size_t i = 0; i < batch.size(); ++i) batch[i].old_values = std::move(values[i]);
  }
  double probe_diff = NAN;
  // The probe compares the rollout's log-probs with the learner's on the same weights:
  // samples of an older version have none to compare with.
  if (!prefetched && c_.weight_sync.probe_every > 0 && (step - 1) % c_.weight_sync.probe_every == 0) {
    probe_diff = probe_logprobs(batch, step - 1);
  }
  // Off-policy corrections: async RL's staleness, or rollout_is's engine mismatch.
  MetricRow correction;
  if (c_.algorithm.async.max_staleness > 0) {
    correction = correct_for_staleness(samples, batch, step);
  } else if (!c_.algorithm.rollout_is.level.empty()) {
    correction = correct_rollout_mismatch(samples, batch, step);
  }
  ExtraAdvantageInputs extra;
  MetricRow shaping;
  if (c_.algorithm.kl.in == "reward" && c_.algorithm.kl.coef > 0) shaping = kl_in_reward(samples, batch, extra);
  if (c_.algorithm.advantage == "remax") extra.baselines = remax_baselines(step, rollout);
  compute_advantages(samples, batch, extra);
  end_phase("advantages");
  log::debug("step {}: training", step);
  trained_since_sync_ = true;  // from the first train command on, the learners may be ahead of the rollout workers
  const nlohmann::json update = train(batch, step);
  const double train_s = seconds_since(t);
  end_phase("train");

  t = Clock::now();
  if (trained_since_sync_) sync_weights(step);  // partial rollouts synced during train()
  const double sync_s = seconds_since(t);
  end_phase("sync");

  double reward_sum = 0, reward_sq = 0;
  for (const Sample& s : samples) {
    reward_sum += s.reward;
    reward_sq += s.reward * s.reward;
  }
  const double n = static_cast<double>(samples.size());
  const double mean = reward_sum / n, std = std::sqrt(std::max(0.0, reward_sq / n - mean * mean));
  const double step_s = seconds_since(step_start);
  MetricRow row = {{"step", static_cast<double>(step)},
                   {"weight_version", static_cast<double>(step)},
                   {"reward/mean", mean},
                   {"reward/std", std},
                   {"reward/fallbacks", static_cast<double>(fallbacks)},
                   {"response/count", n},
                   {"data/skipped_long_prompts", static_cast<double>(skipped_long_prompts_)}};
  const MetricRow about_samples = sample_metrics(c_, samples, batch);
  row.insert(row.end(), about_samples.begin(), about_samples.end());
  for (const auto& [key, value] : update.items()) {
    if (key.rfind("actor/", 0) == 0 || key.rfind("critic/", 0) == 0 || key.rfind("async/", 0) == 0 ||
        key.rfind("tensor_parallel/", 0) == 0) {
      row.emplace_back(key, value.get<double>());
    }
  }
  row.insert(row.end(), {{"time/rollout_s", rollout_s},
                         {"time/reward_s", reward_s},
                         {"time/reward_hidden_s", hidden_reward_s},
                         {"perf/reward_hidden_share",
                          hidden_reward_s + reward_s > 0 ? hidden_reward_s / (hidden_reward_s + reward_s) : 0.0},
                         {"time/train_s", train_s},
                         {"time/sync_s", sync_s},
                         {"time/step_s", step_s},
                         {"rollout/prefill_tokens", static_cast<double>(prefill.computed)},
                         {"rollout/prefill_tokens_saved", static_cast<double>(prefill.saved)},
                         {"perf/train_tokens_per_s", static_cast<double>(response_tokens) / train_s},
                         {"perf/worker_restarts", static_cast<double>(restarts_)}});
  // A prefetched rollout ran during the previous step: it has no time of its own here.
  if (rollout_s > 0) row.emplace_back("perf/rollout_tokens_per_s", static_cast<double>(response_tokens) / rollout_s);
  if (c_.multi_turn()) {
    row.insert(row.end(), {{"multi_turn/session_tokens_reused", static_cast<double>(prefill.session_reused)},
                           {"multi_turn/evicted_sessions", static_cast<double>(prefill.evicted_sessions)},
                           {"multi_turn/kv_pinned_blocks_max", static_cast<double>(prefill.pinned_blocks_max)}});
  }
  row.insert(row.end(), correction.begin(), correction.end());
  row.insert(row.end(), shaping.begin(), shaping.end());
  row.insert(row.end(), dynamic_sampling.begin(), dynamic_sampling.end());
  if (c_.algorithm.overlong.buffer_len > 0) {
    double penalty = 0;
    for (const Sample& s : samples) penalty += overlong_penalty(c_, s);
    row.emplace_back("reward/overlong_penalty", penalty / n);
  }
  if (!std::isnan(probe_diff)) row.emplace_back("sync/probe_logprob_max_diff", probe_diff);
  // What the sync moved (LoRA: the adapters only; split layouts: each engine rank's slices).
  if (last_sync_bytes_ >= 0) row.emplace_back("sync/bytes", static_cast<double>(last_sync_bytes_));
  last_sync_bytes_ = -1;  // the next step's row reports its own syncs
  // As verl does, the last step is evaluated too, whatever its number.
  const int64_t eval_every = c_.experiment.eval_every;
  if (eval_every > 0 && !val_data_.rows.empty() && (step % eval_every == 0 || step == c_.experiment.steps)) {
    const MetricRow val = evaluate(step);  // the policy this step trained (the rollout workers hold it now)
    row.insert(row.end(), val.begin(), val.end());
    end_phase("eval");
  }
  // Read after the evaluation: its reward calls' timeouts are this step's too.
  row.emplace_back("reward/timeouts", static_cast<double>(scoring_.new_timeouts()));
  observers_->observe_workers(step, row);
  metrics_->write(row);
  // The step is whole: the adaptive KL coefficient moves toward its target for the next.
  if (measured_kl_) kl_controller_.update(*measured_kl_, static_cast<int64_t>(samples.size()));
  measured_kl_.reset();
  observers_->publish_step(step, c_.experiment.steps, row);
  if (c_.logging.jsonl && c_.logging.samples_per_step > 0) {
    const size_t count = static_cast<size_t>(c_.logging.samples_per_step);
    for (const std::string& line : sample_log_rows(c_, step, samples, data_, rows, count)) {
      samples_log_->write_line(line);
    }
  }
  // Generation's own rate (response tokens per rollout second): a step's time also holds
  // training, sync and evaluation, which would halve it on eval steps.
  const std::string rollout_rate =
      rollout_s > 0 ? fmt::format("  rollout {:.0f} tok/s", static_cast<double>(response_tokens) / rollout_s) : "";
  progress_->update(step, fmt::format("reward {:.3f}  kl {:.4f}  len {:.1f}{}", mean, update.value("actor/kl", 0.0),
                                      static_cast<double>(response_tokens) / n, rollout_rate));
  log::info("step {}: reward {:.4f}, step {:.2f}s (rollout {:.2f}, train {:.2f}, sync {:.3f})", step, mean, step_s,
            rollout_s, train_s, sync_s);
  if (traced(step)) write_trace(step);
}

void TrainingLoop::run(bool resume) {
  if (skipped_long_prompts_ > 0) {
    const std::string note = fmt::format("{} of the {} rows of {} are over the prompt limit and skipped "
                                         "(data.on_long_prompt: skip)",
                                         skipped_long_prompts_, skipped_long_prompts_ + static_cast<int64_t>(data_.rows.size()),
                                         data_.source);
    log::warn("{}", note);
  }
  for (const std::string& stale : remove_stale_weights_shm()) log::info("removed stale weight segment {}", stale);
  scoring_.open_reward_logs();
  shm_name_ = controller_weights_shm_name(::getpid());
  const std::string group_dirs = run_dir_ + "/weight_sync";  // rendezvous of broadcast groups
  // The weights' shm segments: the run's, and each resharding pair's (weight_sync/reshard.h).
  auto remove_segments = [&] {
    remove_weights_shm(shm_name_);
    remove_reshard_segments(shm_name_, static_cast<int>(c_.learner.tensor_parallel),
                            static_cast<int>(c_.rollout.tensor_parallel));
  };
  std::error_code cleanup_error;  // best effort: a late rank of a dead group may still write there
  std::filesystem::remove_all(group_dirs, cleanup_error);
  std::filesystem::remove(stop_request_path(run_dir_), cleanup_error);  // an earlier `tandem stop`, honoured
  remove_stale_snapshots();
  if (c_.learner.snapshot == "memory") snapshot_root_ = c_.learner.snapshot_dir + "/" + snapshot_prefix() + std::to_string(::getpid());
  const std::string snapshot_root = snapshot_root_;  // this host's part; learners elsewhere remove theirs
  try {
    observers_ = std::make_unique<RunObservers>(pool_, c_, run_dir_);
    start_workers();
    int64_t step = 0;
    try {
      step = restore(resume ? newest_whole_checkpoint(run_dir_) : std::nullopt);
    } catch (const LearnerLost& lost) {  // during the warm-up or the first sync
      step = recover_learners(lost);
    }
    if (resume) std::fprintf(stderr, "tandem: resuming after step %lld\n", static_cast<long long>(step));
    const bool has_validation = reward_model() ? !rm_val_->pairs.empty() : !val_data_.rows.empty();
    if (step == 0 && has_validation && c_.experiment.eval_before_train) {
      MetricRow row = {{"step", 0.0}, {"weight_version", 0.0}};
      const MetricRow val = reward_model() ? evaluate_reward_model(0) : evaluate(0);
      row.insert(row.end(), val.begin(), val.end());
      row.emplace_back("reward/timeouts", static_cast<double>(scoring_.new_timeouts()));
      metrics_->write(row);
      observers_->publish_step(0, c_.experiment.steps, row);
    }
    // The ETA is the pace of the steps run since (re)starting.
    progress_ = std::make_unique<ProgressLine>(c_.logging.console, c_.experiment.steps, step);
    int64_t last_checkpoint = resume ? step : -1;
    const Clock::time_point steps_start = Clock::now();
    const int64_t first_step = step;
    report_status("running", step, 0.0);
    // Until the last step is done, checkpointed and exported: a learner's death anywhere in
    // that (the final checkpoint and the export included) is recovered the same way.
    bool exported = false;
    while (!exported) {
      try {
        if (step >= c_.experiment.steps) {
          // The last step is always checkpointed (unless checkpoints are off): a finished run
          // can be extended from it (tandem resume RUN_DIR --set experiment.steps=N).
          if (c_.experiment.checkpoint_every > 0 && last_checkpoint != step) {
            checkpoint(step);
            last_checkpoint = step;
          }
          export_policy();
          exported = true;
          continue;
        }
        ++step;
        if (reward_model()) {
          run_reward_model_step(step);
        } else {
          run_step(step);
        }
        // After the step's metrics row: a checkpoint of step N always has row N.
        if (c_.experiment.checkpoint_every > 0 && step % c_.experiment.checkpoint_every == 0) {
          checkpoint(step);
          last_checkpoint = step;
        }
        begin_snapshot(step);
        report_status("running", step, seconds_since(steps_start) / static_cast<double>(std::max<int64_t>(1, step - first_step)));
        const int signal = pending_stop_request();
        if ((signal != 0 || std::filesystem::exists(stop_request_path(run_dir_))) && step < c_.experiment.steps) {
          // Asked to stop (Slurm's SIGTERM, or `tandem stop`): the step is whole, so it is
          // checkpointed and the run ends here; `tandem resume` (or a requeued job) continues.
          if (last_checkpoint != step) checkpoint(step);
          std::filesystem::remove(stop_request_path(run_dir_), cleanup_error);
          progress_->finish();
          throw StopRequested(signal, step);
        }
      } catch (const LearnerLost& lost) {
        step = recover_learners(lost);
        progress_ = std::make_unique<ProgressLine>(c_.logging.console, c_.experiment.steps, step);
      }
    }
    progress_->finish();
    mark_run_finished(run_dir_, step);
    report_status("finished", step, 0.0);
  } catch (...) {
    remove_segments();
    std::filesystem::remove_all(group_dirs, cleanup_error);
    if (!snapshot_root.empty()) std::filesystem::remove_all(snapshot_root, cleanup_error);
    throw;
  }
  remove_segments();
  std::filesystem::remove_all(group_dirs, cleanup_error);
  if (!snapshot_root.empty()) std::filesystem::remove_all(snapshot_root, cleanup_error);
}

void TrainingLoop::report_status(const std::string& state, int64_t step, double step_seconds) {
  RunStatus s;
  s.state = state;
  s.pid = ::getpid();
  s.hostname = this_hostname();
  s.started_unix = started_unix_;
  s.updated_unix = unix_now();
  s.step = step;
  s.steps = c_.experiment.steps;
  s.step_seconds = step_seconds;
  for (const WorkerStatus& w : pool_.status()) {
    const char* states[] = {"starting", "ready", "failed", "stopped"};
    s.workers.push_back({w.id.name(), states[static_cast<int>(w.state)], w.pid, w.hostname, w.address, w.restarts,
                         pool_.log_path(w.id)});
  }
  s.last_error = last_error_;
  s.last_error_log = last_error_log_;
  if (observers_) observers_->publish_workers();
  try {
    write_run_status(run_dir_, s);
  } catch (const std::exception& e) {  // a report, not the run: a full disk shows at the next checkpoint
    log::warn("cannot update {}: {}", run_status_path(run_dir_), e.what());
  }
}

}  // namespace training

std::vector<WorkerId> training_workers(const Config& c) {
  std::vector<WorkerId> ids;
  if (training::colocated(c)) {
    for (int64_t s = 0; s < std::max(c.rollout.workers, c.learner.workers); ++s) {
      ids.push_back(training::rollout_worker(c, s));
    }
    return ids;
  }
  for (int64_t r = 0; r < c.rollout.workers; ++r) ids.push_back(training::rollout_worker(c, r));
  for (int64_t r = 0; r < c.learner.workers; ++r) ids.push_back(training::learner_worker(c, r));
  return ids;
}

std::vector<WorkerId> reward_model_workers(const Config& c) {
  std::vector<WorkerId> ids;
  for (int64_t r = 0; r < c.learner.workers; ++r) ids.push_back(training::learner_worker(c, r));
  return ids;
}

void run_training(WorkerPool& pool, const Config& config, RunInputs inputs, const std::string& run_dir, bool resume) {
  training::TrainingLoop(pool, config, std::move(inputs), run_dir).run(resume);
}

}  // namespace tandem
