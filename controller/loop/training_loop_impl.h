// Private to controller/loop/*.cpp: the TrainingLoop class behind run_training
// (controller/loop/training_loop.h) and the small types its files share:
//   training_loop.cpp  the step: advantages, train, metrics; run and status
//   rollout.cpp        rollout_generate out, samples back (checked, in group order)
//   warm_up.cpp        the supervised warm-up (sft:)
//   workers.cpp        the workers: start, commands that survive restarts,
//                      checkpoints, restore and recovery
//   sync_weights.cpp   weight sync from the learners to the rollout workers
//   tracing.cpp        the Chrome traces of logging.trace_every
// Two parts are objects of their own, each owned by the loop: StepScoring
// (step_scoring.h: the rewards and the scoring thread) and RunObservers
// (controller/observe/run_observers.h).
#pragma once

#include "actor/model_config.h"
#include "actor/tokenizer.h"
#include "controller/run/checkpoints.h"
#include "controller/data/dataset.h"
#include "controller/loop/sample.h"
#include "controller/loop/step_scoring.h"
#include "controller/run/run_status.h"
#include "controller/run/metrics_writer.h"
#include "controller/observe/run_observers.h"
#include "controller/run/progress.h"
#include "controller/workers/rollout_client.h"
#include "controller/run/run_inputs.h"
#include "controller/workers/worker_pool.h"
#include "core/config.h"
#include "core/error.h"
#include "learner/kl.h"
#include "learner/train_batch.h"
#include "rewards/registry.h"
#include "weight_sync/transport.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tandem::training {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

inline bool colocated(const Config& c) { return c.placement == "colocated"; }

inline WorkerId rollout_worker(const Config& c, int64_t rank) {
  return {colocated(c) ? "colocated" : "rollout", static_cast<uint32_t>(rank)};
}

// Samples [begin, end) of `count` that learner rank `rank` works on: the data-parallel
// replicas split them in contiguous parts; the learner.tensor_parallel ranks of a replica
// (ranks r·T .. r·T + T - 1) all get the same part.
inline std::pair<size_t, size_t> learner_share(size_t count, int64_t rank, const LearnerConfig& learner) {
  const size_t t = static_cast<size_t>(std::max<int64_t>(1, learner.tensor_parallel));
  const size_t replicas = static_cast<size_t>(learner.workers) / t, replica = static_cast<size_t>(rank) / t;
  return {count * replica / replicas, count * (replica + 1) / replicas};
}

inline WorkerId learner_worker(const Config& c, int64_t rank) {
  return {colocated(c) ? "colocated" : "learner", static_cast<uint32_t>(rank)};
}

// step_metrics.cpp: what a step reports about its samples.
// reward/<name> (each reward's weighted mean), reward/<name>/<part> (each named part's
// mean), response/length_{mean,max,min}, response/clip_ratio, prompt/length_mean,
// critic/advantages/{mean,max,min} (over response tokens).
MetricRow sample_metrics(const Config& c, const std::vector<Sample>& samples, const std::vector<TrainingSample>& batch);

// DAPO's soft overlong punishment of one sample (reward_shaping.cpp): 0 up to buffer_len
// tokens before the length limit, then down linearly to -penalty_factor at the limit:
//   min(0, -(length - (limit - buffer_len)) / buffer_len * penalty_factor)
// with the limit rollout.max_new_tokens (multi-turn: max_total_tokens). 0 when off.
double overlong_penalty(const Config& c, const Sample& sample);
// The metric key of each config.reward entry: "reward/<name>", with "_<index>" added where
// two entries share a name or a name is one of the overall keys (mean, std, fallbacks);
// keys are unique. A "/" or control character in a name or part becomes "_" (a key has
// at most the two levels reward/<name>/<part>).
std::vector<std::string> reward_metric_keys(const std::vector<RewardConfig>& rewards);
std::string metric_name_part(const std::string& name);
// samples.jsonl rows: `count` samples (all when count >= samples.size()) spread over the
// prompts; prompt slot i is data.rows[rows[i]] (its text, and its ground truth, the
// `answer` field, and data_source where the row has them).
std::vector<std::string> sample_log_rows(const Config& c, int64_t step, const std::vector<Sample>& samples,
                                         const Dataset& data, const std::vector<size_t>& rows, size_t count);

inline uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  return x * 0xBF58476D1CE4E5B9ULL;
}

// A worker that hosts a learner rank died or failed: the controller restarts the
// learners from the last checkpoint (or stops when restarts are exhausted).
class LearnerLost : public Error {
 public:
  explicit LearnerLost(const WorkerFailure& failure) : Error(failure.what()), failure_(failure) {}
  const WorkerFailure& failure() const { return failure_; }

 private:
  WorkerFailure failure_;
};

// A command sent to a worker, and how to send it again to a restarted one.
struct Request {
  WorkerId worker;
  uint64_t id = 0;
  std::function<uint64_t()> send;
};

class TrainingLoop {
 public:
  TrainingLoop(WorkerPool& pool, const Config& config, RunInputs inputs, const std::string& run_dir);
  ~TrainingLoop();

  void run(bool resume);

 private:
  void start_workers();
  void init_rollout(const WorkerId& worker);
  void init_learners(const std::vector<WorkerId>& workers);
  // Rewrites RUN_DIR/status.json (controller/run/run_status.h).
  void report_status(const std::string& state, int64_t step, double step_seconds);
  int64_t local_rank_of(const std::vector<WorkerId>& workers, size_t index) const;
  // Whether every worker registered from one host (same name and address): shm weight sync works.
  bool workers_on_one_host() const;
  // Sends every request and waits for the replies (by request index). A rollout worker
  // that dies or hangs is restarted with the current weights and its requests are sent
  // again; a worker hosting a learner rank that dies or hangs is a LearnerLost. An error
  // a worker reports is thrown as it is.
  // `on_progress` sees the requests' progress messages as they arrive.
  std::vector<CommandReply> collect(std::vector<Request> requests, const WorkerPool::ProgressHandler& on_progress = {});
  // Sends each request now (a worker known dead leaves its request unsent, id 0, for
  // wait_for to recover from).
  void send_now(std::vector<Request>& requests);
  // collect() for requests sent already by send_now (ids set, or 0 where not sent).
  std::vector<CommandReply> wait_for(std::vector<Request> requests, const WorkerPool::ProgressHandler& on_progress = {});
  // A request that sends `command` to `worker` (again, when the worker was restarted).
  Request request(const WorkerId& worker, const std::string& command, const std::string& body,
                  const std::vector<std::string>& attachments = {});
  // The same command to every learner rank (they run it together).
  std::vector<CommandReply> call_learners(const std::string& command, const std::string& body);
  bool hosts_learner(const WorkerId& worker) const;
  void count_restart(const WorkerFailure& failure);
  // Restarts a dead or hung rollout worker; `load_weights`: with the current weights
  // (false when a sync in progress will deliver them).
  void restart_rollout(const WorkerFailure& failure, bool load_weights = true);
  // The death behind a learner's command error (a collective failing on a survivor when a
  // peer died), waited for as long as the pool needs to see a death; nullopt when none.
  std::optional<WorkerFailure> death_behind(const WorkerFailure& error);
  // After a LearnerLost: restarts every learner-hosting worker and restores the newest
  // whole checkpoint (or the start). Returns the last step done.
  int64_t recover_learners(const LearnerLost& lost);
  // Puts learners, data order and metrics at `checkpoint` (nullopt: the start, including
  // the warm-up), then syncs weights. Returns the last step done.
  int64_t restore(const std::optional<CheckpointRef>& checkpoint);
  // Metrics and sample logs cut back to `step` (rows after it are redone), the observers
  // told, the rollout workers given the learners' weights of `step`.
  void continue_from(int64_t step);
  // learner_snapshots.cpp (learner.snapshot): after each step the learners copy their
  // state to their hosts' memory while the next step's rollout runs; a learner's death
  // then costs at most the step in progress.
  // Removes this host's snapshot directories of controllers that are gone.
  void remove_stale_snapshots() const;
  // Asks the learners to snapshot `step` (done, its metrics written); does not wait.
  void begin_snapshot(int64_t step);
  // Waits for the snapshot begun last; it becomes the one recovery uses. A learner that
  // cannot write one turns snapshots off for the run (with a warning), losing nothing.
  void finish_snapshot();
  // A learner died: the snapshot being written counts if every rank had answered (read
  // before the restarts, which drop the dead workers' replies); else the one before does.
  void keep_answered_snapshot();
  // After the learners were restarted: loads the newest whole snapshot into them and
  // puts the data order and metrics at its step. nullopt (the caller restores the last
  // checkpoint) when there is none or some rank cannot load it.
  std::optional<int64_t> restore_snapshot();
  // The learner_snapshot / learner_load_snapshot body of step `step` for learner rank `rank`.
  std::string snapshot_body(int64_t step, size_t rank) const;
  // The learner rank whose snapshot file holds rank `rank`'s state (learner_client::snapshot_body).
  int snapshot_source_rank(size_t rank) const;
  void warm_up();
  void run_step(int64_t step);
  // reward_model_steps.cpp (tandem train-rm, reward_model_ set): one Bradley-Terry step on
  // reward_model.batch_size pairs, its metrics row (rm/*), and the validation pairs' loss
  // and accuracy every experiment.eval_every steps (and at the last).
  bool reward_model() const { return rm_train_.has_value(); }
  void run_reward_model_step(int64_t step);
  MetricRow evaluate_reward_model(int64_t step);
  // Every validation answer's score from the learners, pairs whole (chosen, then rejected).
  std::vector<float> reward_model_val_scores();
  // What the export's config.json adds: `mean` and `std` of the final model's scores over
  // the validation answers (JSON object), for reward.N.normalize.
  std::string reward_model_export_config();
  // Pairs `indices` of `set` as training samples, chosen then rejected, dealt to the
  // learner ranks whole (contiguous shares).
  std::vector<std::vector<TrainingSample>> pair_shares(const PreferenceSet& set, const std::vector<size_t>& indices) const;
  // The rows the data order walks: the dataset's, or train-rm's pairs.
  size_t order_rows() const { return reward_model() ? rm_train_->pairs.size() : data_.rows.size(); }
  // The rollout engines' prompt work in a generate(), summed over the workers' replies:
  // tokens prefilled, and prompt tokens not run thanks to rollout.prefix_sharing.
  struct PrefillCounts {
    int64_t computed = 0;
    int64_t saved = 0;
    // Multi-turn sessions: prefill the kept KV blocks saved, sessions evicted, most
    // blocks pinned at once on a worker.
    int64_t session_reused = 0, evicted_sessions = 0, pinned_blocks_max = 0;
  };
  // A step's prompts and the samples generated for them.
  struct StepRollout {
    int64_t step = 0;
    std::vector<size_t> rows;                   // dataset rows of the prompts
    std::vector<std::vector<int32_t>> prompts;  // their token ids
    std::vector<Sample> samples;
    PrefillCounts prefill;
    bool prefetched = false;    // generated during the previous step's training (algorithm.async)
    bool scored_early = false;  // samples went to the scoring thread as they finished
  };
  // Step `step`'s rows and prompts (advancing the order); no samples yet.
  StepRollout next_prompts(int64_t step);
  // reward_shaping.cpp: a rollout's samples scored (the early scores collected, the rest
  // scored now), with the overlong penalty (algorithm.overlong) in their rewards.
  struct RoundScores {
    int64_t fallbacks = 0;
    double reward_s = 0;         // scoring time after generation
    double hidden_reward_s = 0;  // scoring time that ran under generation
  };
  RoundScores score_round(StepRollout& rollout);
  // reward_shaping.cpp: algorithm.filter_groups (DAPO's dynamic sampling). Drops the groups
  // whose samples all score the same and generates more prompts (at most max_batches
  // rounds) until data.batch_size groups remain; `rollout` becomes those. With fewer, the
  // step trains on them and says so; with none, on the first round unfiltered. Adds the
  // rounds' scoring and generation times. Returns data/filtered_groups and
  // data/generation_rounds.
  MetricRow keep_informative_groups(int64_t step, StepRollout& rollout, RoundScores& scores, double& rollout_s);
  int64_t generation_round_ = 0;  // of the step being generated (its sampling seeds), 0 but for filter_groups
  // Generates step `step` now, streaming finished samples to the scoring thread when
  // rollout.score_while_generating.
  StepRollout rollout_now(int64_t step);
  // How evaluation samples (eval: n, temperature; no top-p/top-k).
  struct EvalSampling {
    int64_t n = 1;
    double temperature = 0;
  };
  // prompts[i]: the token ids of the step's prompt i. group_size samples each, with the
  // rollout's sampling settings; with `eval`, its n and temperature and seeds of its own.
  // `on_early`: the rollout workers stream finished samples, handed over here as they come
  // (before the reply that has them all).
  // `rows[i]`: prompt i's dataset row (of val_data_ with `eval`): an environment's
  // instances are made from it.
  std::vector<Sample> generate(int64_t step, const std::vector<size_t>& rows, const std::vector<std::vector<int32_t>>& prompts,
                               const std::optional<EvalSampling>& eval = std::nullopt,
                               const std::function<void(std::vector<Sample>&&)>& on_early = {});
  // rollout_generate for every rollout worker (their shares of `prompts`); `stream`: with
  // progress messages carrying finished samples.
  // `interruptible`: a weight sync may land part-way (algorithm.async.partial_rollouts).
  std::vector<Request> rollout_requests(int64_t step, const std::vector<size_t>& rows,
                                        const std::vector<std::vector<int32_t>>& prompts,
                                        const std::optional<EvalSampling>& eval, bool stream,
                                        bool interruptible = false);
  // The samples of rollout_generate replies in group order (`expected` of them); sets
  // last_prefill_. `first_version`: the weights the rollout workers held when asked.
  std::vector<Sample> samples_from(const std::vector<CommandReply>& replies, size_t expected, int64_t first_version);
  // async_rl.cpp: whether step + 1's rollout runs during step's training.
  bool prefetches_after(int64_t step) const;
  // async_rl.cpp: the learners' log-probs become the samples' old log-probs
  // and min(their ratio to the rollout's, is_cap) each token's importance weight, when
  // some sample is of older weights than the learners'. Returns the async/* metrics.
  MetricRow correct_for_staleness(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch, int64_t step);
  // rollout_correction.cpp: algorithm.rollout_is. The learners' log-probs become the
  // samples' old log-probs and their ratio to the rollout's (truncated or masked) each
  // token's importance weight. Returns the rollout_is/* metrics.
  MetricRow correct_rollout_mismatch(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch,
                                     int64_t step);
  // The samples a rollout_generate reply (or progress message) carries; each token's
  // weights must be first_version or a later one synced since (never past the current).
  std::vector<Sample> read_samples(const CommandReply& reply, int64_t first_version) const;
  // Checks each sample's weight versions against the rollout's first and the run's current.
  std::vector<Sample> to_samples(const CommandReply& reply, std::vector<rollout_client::ReturnedSample> returned,
                                 int64_t first_version) const;
  // evaluation.cpp: every data.val prompt, eval.n responses each, scored; returns
  // the val/* metrics and appends the samples to val_samples.jsonl.
  MetricRow evaluate(int64_t step);
  std::vector<std::vector<float>> per_token_from_learners(const std::string& command,
                                                         const std::vector<TrainingSample>& samples);
  double probe_logprobs(const std::vector<TrainingSample>& batch, int64_t version);
  // What the estimator gets besides the rewards (advantage_inputs.cpp): per-token rewards
  // (the KL penalty of kl.in: reward) and remax's greedy baselines, each empty when unused.
  struct ExtraAdvantageInputs {
    std::vector<std::vector<float>> token_rewards;  // per sample, per response token
    std::vector<double> baselines;                  // per sample
  };
  void compute_advantages(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch,
                          const ExtraAdvantageInputs& extra);
  // advantage_inputs.cpp: algorithm.kl.in: reward. The reference's log-probs (into each
  // sample's ref_logprobs, so the learners report actor/kl), the per-token penalty
  // -coef * kl_t into `extra`. Returns the actor/reward_kl_penalty* metrics; the adaptive
  // coefficient moves once the step is whole (a step redone after a learner's death uses
  // the coefficient its first try did).
  MetricRow kl_in_reward(const std::vector<Sample>& samples, std::vector<TrainingSample>& batch,
                         ExtraAdvantageInputs& extra);
  // advantage_inputs.cpp: advantage remax. Each prompt's greedy answer, generated and
  // scored now: its reward is the baseline of the prompt's samples.
  std::vector<double> remax_baselines(int64_t step, const StepRollout& rollout);
  // One learner_train of step's batch; when prefetches_after(step), the next step's
  // rollout runs meanwhile and lands in prefetched_.
  nlohmann::json train(std::vector<TrainingSample>& batch, int64_t step);
  // Every rollout worker gets the learners' weights as `version`. `rewind`: after a
  // restore the version may go back (rollout workers may be ahead).
  void sync_weights(int64_t version, bool rewind = false);
  // shm, cuda_ipc: the learners publish, then the rollout workers read.
  // `through_transport`: some rollout worker reads the mailbox (not only the colocated slot 0).
  void sync_through_mailbox(int64_t version, bool rewind, bool through_transport);
  // collective, nccl: the learners' publish and the loads of `receivers` (rollout ranks)
  // run together in one group; a member that dies is restarted and the sync redone.
  void sync_through_group(int64_t version, bool rewind, const std::vector<int64_t>& receivers, bool local);
  // One try through group_: sends the publish and every load (their request ids into
  // `ids`), waits for all of them.
  void send_group_sync(int64_t version, bool rewind, bool local, std::vector<uint64_t>& ids);
  // Waits out the commands of a failed try (they fail once the group is abandoned or its
  // sender gone), so that the next try's commands do not queue behind them in the workers.
  void drain_attempt(const std::vector<uint64_t>& ids, const std::vector<int64_t>& group_members);
  // A collective group's rendezvous directories: its own, and with resharding every pair's.
  static std::vector<std::string> rendezvous_addresses(const WeightSyncOptions& options);
  // A failure during a group sync to rollout ranks `group_members`: restarts the dead
  // rollout worker behind it (or throws LearnerLost, or the failure itself when no worker died).
  void recover_group_member(const WorkerFailure& failure, const std::vector<int64_t>& group_members);
  WeightSyncOptions transport_options() const;
  bool mailbox_transport() const;
  void load_current_weights(const WorkerId& worker);
  void checkpoint(int64_t step);
  void export_policy();
  std::string config_for_workers() const;
  std::vector<std::vector<std::vector<TrainingSample>>> rank_shares(const std::vector<TrainingSample>& batch) const;
  std::vector<WorkerId> learner_hosts() const;

  WorkerPool& pool_;
  Config c_;
  std::string run_dir_;
  std::string model_dir_;
  ModelConfig model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  Dataset data_;
  std::vector<std::vector<int32_t>> prompt_ids_;  // [row]: the row's prompt encoded
  Dataset val_data_;                                  // data.val (no rows: no evaluation)
  std::optional<PreferenceSet> rm_train_, rm_val_;    // tandem train-rm's pairs (RunInputs)
  std::vector<std::vector<int32_t>> val_prompt_ids_;
  int64_t skipped_long_prompts_ = 0;             // rows left out as too long (data.on_long_prompt: skip)
  // The run's rewards and scoring thread: every sample is scored there.
  StepScoring scoring_;
  std::optional<PromptOrder> order_;  // set once the workers are up
  std::string shm_name_;  // shm, cuda_ipc: the segment the learners publish to
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<MetricsWriter> samples_log_;  // samples.jsonl
  std::unique_ptr<MetricsWriter> val_samples_log_;  // val_samples.jsonl
  std::unique_ptr<ProgressLine> progress_;
  int64_t weight_version_ = 0;      // what the rollout workers hold
  int64_t last_sync_bytes_ = -1;    // the learners' stream bytes of the latest sync (-1: none this step)
  bool shm_published_ = false;      // shm_name_ holds weight_version_
  bool publishing_ = false;         // learners are writing the next version
  bool synced_ = false;              // a sync has run since the workers started
  bool trained_since_sync_ = false;  // the learners hold weights newer than weight_version_
  // collective, nccl: the current broadcast group (rank i + 1 is rollout rank receivers[i]);
  // dropped when a member restarts or a sync through it fails.
  struct WeightGroup {
    std::vector<int64_t> receivers;
    WeightSyncOptions options;  // rank 0's
    bool used = false;          // a sync went through: its rendezvous directory is spent
  };
  std::optional<WeightGroup> group_;
  int64_t groups_made_ = 0;
  int64_t restarts_ = 0;            // worker restarts so far (launcher.max_restarts)
  int64_t learner_groups_ = 0;      // learner process groups formed so far (each meets at a rendezvous of its own)
  double started_unix_ = unix_now();
  std::string last_error_;          // the newest worker failure, for RUN_DIR/status.json
  std::string last_error_log_;
  PrefillCounts last_prefill_;  // of the latest generate()
  std::string turn_frames_;     // multi-turn: RunInputs::turn_frames, for rollout_init
  std::string environment_template_;  // RunInputs::environment_template, for rollout_init
  std::vector<std::string> environment_rows_, val_environment_rows_;  // [row]: RunInputs's
  // Asynchronous RL: the next step's rollout, generated during this step's training.
  std::optional<StepRollout> prefetched_;
  // The KL coefficient of kl.in: reward, adapted after every step with kl.adaptive; saved
  // with checkpoints and snapshots.
  KlController kl_controller_{c_.algorithm.kl, c_.algorithm.kl.horizon};
  std::optional<double> measured_kl_;  // kl_in_reward's measurement, for the update once the step is whole
  // learner.snapshot: the learners' state after step `step`, in memory on their hosts
  // (snapshot_root_), with what the controller needs to go on from there.
  struct LearnerSnapshot {
    int64_t step = 0;
    PromptOrder::Position position;         // the data order after the step (and its prefetch)
    std::optional<StepRollout> prefetched;  // algorithm.async: the next step's rollout, made already
    double kl_coef = 0;                     // the KL coefficient after the step (adaptive)
    std::vector<uint64_t> requests;         // while being written: the learners' learner_snapshot
  };
  std::string snapshot_root_;                        // empty: snapshots off
  std::optional<LearnerSnapshot> snapshot_;          // the newest whole one
  std::optional<LearnerSnapshot> writing_snapshot_;  // begun, not yet waited for

  // What watches the run besides metrics.jsonl (TensorBoard, Prometheus, the dashboard,
  // worker_phases.jsonl and stragglers): made when the run starts.
  std::unique_ptr<RunObservers> observers_;
  // tracing.cpp: the Chrome traces of logging.trace_every.
  bool traced(int64_t step) const { return c_.logging.trace_every > 0 && step % c_.logging.trace_every == 0; }
  // A traced step: every process's spans so far are dropped; the step's start is noted.
  void begin_trace();
  // Collects the spans of every process, measures worker clocks, writes traces/step_<N>.json.
  void write_trace(int64_t step);
  int64_t trace_begin_us_ = 0;
};

// learner_snapshots.cpp: "tandem-learner-HOST-", then the controller's pid, names a run's
// learner snapshots in learner.snapshot_dir.
std::string snapshot_prefix();

}  // namespace tandem::training
