// The training loop's side that deals with worker processes: starting them, commands
// that survive a worker's death (collect), checkpoints, restore, recovery.
#include "controller/loop/training_loop_impl.h"

#include "controller/launch/launch_plan.h"
#include "controller/workers/learner_client.h"
#include "controller/workers/rollout_client.h"
#include "core/files.h"
#include "core/log.h"
#include "learner/learner_device.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

namespace tandem::training {

namespace fs = std::filesystem;

// Workers get the config with thread counts that share this host's cores among them.
std::string TrainingLoop::config_for_workers() const {
  Config c = c_;
  if (c.rollout.threads == 0) c.rollout.threads = std::max<int64_t>(1, host_cores() / c.rollout.workers);
  // auto: cuda only when every learner rank of this machine gets a GPU and libtorch has
  // CUDA (learner/learner_device.h); the workers get the resolved value.
  if (c.learner.device == "auto") {
    c.learner.device =
        resolve_learner_device("auto", static_cast<int>(c.learner.workers) - 1, learner_cuda_support()).type;
  }
  return config_to_yaml(c);
}

void TrainingLoop::init_rollout(const WorkerId& worker) {
  pool_.wait({pool_.send(worker, "rollout_init",
                         rollout_client::init_body(config_for_workers(), model_dir_, model_.sampled_vocab_size, turn_frames_,
                                                   environment_template_))});
}

// A learner rank's index among the ranks on its host (its GPU under learner.device: cuda):
// hosts told apart by name and address, as the workers registered.
int64_t TrainingLoop::local_rank_of(const std::vector<WorkerId>& workers, size_t index) const {
  const WorkerStatus& mine = pool_.worker_status(workers[index]);
  int64_t local_rank = 0;
  for (size_t i = 0; i < index; ++i) {
    const WorkerStatus& other = pool_.worker_status(workers[i]);
    if (other.hostname == mine.hostname && other.address == mine.address) ++local_rank;
  }
  return local_rank;
}

bool TrainingLoop::workers_on_one_host() const {
  const std::vector<WorkerStatus> workers = pool_.status();
  for (const WorkerStatus& w : workers) {
    if (w.hostname != workers.front().hostname || w.address != workers.front().address) return false;
  }
  return true;
}

void TrainingLoop::init_learners(const std::vector<WorkerId>& workers) {
  const std::string config_text = config_for_workers();
  // train-rm: one optimizer step per step.
  const int64_t optimizer_steps =
      reward_model() ? c_.experiment.steps : c_.experiment.steps * c_.learner.epochs * c_.learner.mini_batches;
  // The group's rendezvous: a file store in the run directory when the ranks share a host,
  // else a TCP store served by rank 0 on a port it finds free on its own address.
  // A fresh name for every group formed (a group's store keys must not meet an earlier one's).
  std::string rendezvous = fmt::format("file://{}/.rendezvous-{}-{}", run_dir_, ::getpid(), learner_groups_++);
  const std::string& rank0_address = pool_.worker_status(workers[0]).address;
  bool one_host = true;
  for (const WorkerId& w : workers) one_host = one_host && pool_.worker_status(w).address == rank0_address;
  if (c_.learner.workers > 1 && !one_host) {
    const auto replies =
        pool_.wait({pool_.send(workers[0], "learner_free_port", learner_client::free_port_body(rank0_address))});
    rendezvous = fmt::format("tcp://{}:{}", rank0_address, learner_client::read_free_port(replies.begin()->second));
  }
  if (c_.learner.workers > 1) log::info("learner group of {} ranks meets at {}", c_.learner.workers, rendezvous);
  std::vector<uint64_t> pending;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    learner_client::InitArgs args;
    args.config_yaml = config_text;
    args.model_dir = model_dir_;
    args.sampled_vocab_size = model_.sampled_vocab_size;
    args.rank = static_cast<int>(r);
    args.local_rank = static_cast<int>(local_rank_of(workers, static_cast<size_t>(r)));
    args.host = pool_.worker_status(workers[static_cast<size_t>(r)]).address;
    args.world_size = static_cast<int>(c_.learner.workers);
    args.rendezvous = c_.learner.workers > 1 ? rendezvous : std::string();
    args.total_optimizer_steps = optimizer_steps;
    args.reward_model = reward_model();
    args.threads = static_cast<int>(learner_threads_per_rank(c_));
    pending.push_back(pool_.send(workers[static_cast<size_t>(r)], "learner_init", learner_client::init_body(args)));
  }
  pool_.wait(pending);
  if (rendezvous.rfind("file://", 0) == 0) fs::remove(rendezvous.substr(7));
}

std::vector<WorkerId> TrainingLoop::learner_hosts() const {
  std::vector<WorkerId> ids;
  for (int64_t r = 0; r < c_.learner.workers; ++r) ids.push_back(learner_worker(c_, r));
  return ids;
}

bool TrainingLoop::hosts_learner(const WorkerId& worker) const {
  const std::vector<WorkerId> hosts = learner_hosts();
  return std::find(hosts.begin(), hosts.end(), worker) != hosts.end();
}

void TrainingLoop::start_workers() {
  if (!reward_model()) {  // train-rm runs learners only
    for (int64_t r = 0; r < c_.rollout.workers; ++r) init_rollout(rollout_worker(c_, r));
  }
  init_learners(learner_hosts());
}

void TrainingLoop::count_restart(const WorkerFailure& failure) {
  last_error_ = failure.what();
  last_error_log_ = failure.log_path();
  if (failure.lost_controller()) {
    // The controller was stopped (SIGSTOP, a debugger) or starved past the workers'
    // patience: the workers did as designed, and their restart is not counted.
    log::warn("{}: the controller itself was paused or starved; restarting it without counting a restart",
              failure.what());
    return;
  }
  if (restarts_ >= c_.launcher.max_restarts) {
    throw Error(fmt::format("{}; not restarting it: the run has used all {} restarts (launcher.max_restarts)",
                            failure.what(), c_.launcher.max_restarts));
  }
  ++restarts_;
}

void TrainingLoop::restart_rollout(const WorkerFailure& failure, bool load_weights) {
  // Every wait reports any failed worker, so restarting one may find others dead: each is
  // restarted here too (with the current weights), the newest found first.
  struct Dead {
    WorkerFailure failure;
    bool load_weights;
    bool restarted = false;
  };
  std::vector<Dead> dead = {{failure, load_weights}};
  while (!dead.empty()) {
    Dead& d = dead.back();
    const WorkerId worker = d.failure.worker();
    try {
      if (!d.restarted) {
        count_restart(d.failure);
        log::warn("{}; restarting it ({} of {} restarts)", d.failure.what(), restarts_, c_.launcher.max_restarts);
        pool_.restart(worker);
        d.restarted = true;
        group_.reset();  // the broadcast group lost a member
      }
      init_rollout(worker);
      if (d.load_weights) load_current_weights(worker);
      dead.pop_back();
    } catch (const WorkerFailure& again) {
      if (again.command_error()) throw;
      if (hosts_learner(again.worker())) throw LearnerLost(again);
      if (again.worker() == worker) {
        d = {again, d.load_weights};  // the new process died too
      } else {
        dead.push_back({again, true});
      }
    }
  }
}

std::vector<CommandReply> TrainingLoop::collect(std::vector<Request> requests,
                                                const WorkerPool::ProgressHandler& on_progress) {
  return wait_for(std::move(requests), on_progress);  // unsent (id 0): wait_for sends them
}

void TrainingLoop::send_now(std::vector<Request>& requests) {
  for (Request& r : requests) {
    try {
      r.id = r.send();
    } catch (const WorkerFailure&) {
      r.id = 0;  // its worker is known dead: wait_for meets the failure again and recovers
    }
  }
}

std::vector<CommandReply> TrainingLoop::wait_for(std::vector<Request> requests,
                                                 const WorkerPool::ProgressHandler& on_progress) {
  while (true) {
    try {
      for (Request& r : requests) {
        // Not sent yet, or the unfinished work of a worker restarted meanwhile (restarting
        // one may find others dead too): sent now. A send to a dead worker throws its failure.
        if (!pool_.has_request(r.id)) r.id = r.send();
      }
      std::vector<uint64_t> ids;
      for (const Request& r : requests) ids.push_back(r.id);
      auto replies = pool_.wait(ids, on_progress);
      std::vector<CommandReply> out;
      for (const Request& r : requests) out.push_back(std::move(replies.at(r.id)));
      return out;
    } catch (const WorkerFailure& failure) {
      if (failure.command_error()) {
        // A learner whose peer died fails its collective ("all_reduce failed"): the death
        // behind it is the failure to recover from. Anything else would fail again.
        const std::optional<WorkerFailure> dead = hosts_learner(failure.worker()) ? death_behind(failure) : std::nullopt;
        if (!dead) throw;
        if (hosts_learner(dead->worker())) throw LearnerLost(*dead);
        restart_rollout(*dead);
        continue;
      }
      if (hosts_learner(failure.worker())) throw LearnerLost(failure);
      restart_rollout(failure);
    }
  }
}

std::optional<WorkerFailure> TrainingLoop::death_behind(const WorkerFailure& error) {
  // A local worker's exit reaches the pool within milliseconds, a remote one's when its
  // heartbeats stop: wait that long (at least a second) for it.
  const double patience = std::max(1.0, c_.launcher.heartbeat_timeout_s);
  const Clock::time_point until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(patience));
  while (true) {
    if (std::optional<WorkerFailure> dead = pool_.first_failure()) return dead;
    if (Clock::now() >= until) break;
    pool_.poll_events(0.05);
  }
  log::info("{}: no worker died behind it; it is the command's own error", error.what());
  return std::nullopt;
}

Request TrainingLoop::request(const WorkerId& worker, const std::string& command, const std::string& body,
                              const std::vector<std::string>& attachments) {
  return {worker, 0, [this, worker, command, body, attachments] {
            return pool_.send(worker, command, body, attachments);
          }};
}

std::vector<CommandReply> TrainingLoop::call_learners(const std::string& command, const std::string& body) {
  finish_snapshot();  // the learners' state of the step before: whole before they move on
  std::vector<Request> requests;
  for (const WorkerId& worker : learner_hosts()) requests.push_back(request(worker, command, body));
  return collect(std::move(requests));
}

void TrainingLoop::checkpoint(int64_t step) {
  const std::string dir = fmt::format("{}/checkpoints/step_{}", run_dir_, step);
  fs::create_directories(run_dir_ + "/checkpoints");
  if (fs::exists(dir)) {
    // A try of this step that a learner's death cut short wrote it (the step is redone
    // from the state before it): the redone step's checkpoint replaces it.
    log::info("replacing {}, written by an earlier try of step {}", dir, step);
    fs::remove_all(dir);
  }
  call_learners("learner_save", learner_client::save_body(dir, model_dir_));
  const PromptOrder::Position position = order_->position();
  write_file_atomic(dir + "/controller_state.json",
                    nlohmann::json{{"step", step},
                                   {"data_epoch", position.epoch},
                                   {"data_index", position.index},
                                   {"data_rows", order_rows()},
                                   {"kl_coef", kl_controller_.coef()}}
                            .dump(2) +
                        "\n");
  write_checkpoint_manifest(dir);  // last: only now is the checkpoint usable
  prune_checkpoints(run_dir_, c_.experiment.keep_checkpoints);
}

int64_t TrainingLoop::restore(const std::optional<CheckpointRef>& checkpoint) {
  int64_t step = 0;
  prefetched_.reset();  // generated for a step that is now redone from the checkpoint
  snapshot_.reset();    // newer than the checkpoint: the learners' state no longer leads there
  writing_snapshot_.reset();
  order_.emplace(order_rows(), static_cast<uint64_t>(c_.experiment.seed), c_.data.shuffle);
  kl_controller_.set_coef(c_.algorithm.kl.coef);
  if (checkpoint) {
    call_learners("learner_load", learner_client::load_body(checkpoint->dir));
    const std::string state_path = checkpoint->dir + "/controller_state.json";
    const nlohmann::json state = nlohmann::json::parse(read_file(state_path).value());
    step = state.at("step").get<int64_t>();
    order_->restore({state.at("data_epoch").get<int64_t>(), state.at("data_index").get<int64_t>()});
    // The adaptive coefficient goes on from where it was; a fixed one is the config's
    // (a resume may --set it). Checkpoints from before the adaptive one have none.
    if (c_.algorithm.kl.adaptive) kl_controller_.set_coef(state.value("kl_coef", c_.algorithm.kl.coef));
    log::info("restored {} (step {})", checkpoint->dir, step);
  } else {
    warm_up();
  }
  continue_from(step);
  return step;
}

void TrainingLoop::continue_from(int64_t step) {
  const std::string metrics_path = run_dir_ + "/metrics.jsonl";
  metrics_.reset();  // truncation replaces the file: reopen after it
  truncate_metrics(metrics_path, step);
  metrics_ = std::make_unique<MetricsWriter>(c_.logging.jsonl ? metrics_path : "");
  const std::string samples_path = run_dir_ + "/samples.jsonl";  // its rows carry their step too
  samples_log_.reset();
  truncate_metrics(samples_path, step);
  samples_log_ = std::make_unique<MetricsWriter>(c_.logging.jsonl ? samples_path : "");
  const std::string val_samples_path = run_dir_ + "/val_samples.jsonl";
  val_samples_log_.reset();
  truncate_metrics(val_samples_path, step);
  val_samples_log_ = std::make_unique<MetricsWriter>(c_.logging.jsonl && !val_data_.rows.empty() ? val_samples_path : "");
  observers_->restart_at(step);
  if (!reward_model()) sync_weights(step, /*rewind=*/true);  // train-rm has no rollout workers
}

int64_t TrainingLoop::recover_learners(const LearnerLost& lost) {
  WorkerFailure last = lost.failure();
  bool count = true;  // false when the try is repeated for a rollout worker's death, not a learner's
  keep_answered_snapshot();
  while (true) {
    if (count) {
      count_restart(last);
      log::warn("{}; restarting the learners ({} of {} restarts)", last.what(), restarts_, c_.launcher.max_restarts);
      std::fprintf(stderr, "\ntandem: %s\ntandem: restarting the learners\n", last.what());
    }
    count = true;
    // Until the restore's sync, the learners hold other weights than the rollout workers:
    // a rollout worker restarted meanwhile waits for that sync (load_current_weights).
    group_.reset();  // its sender is gone
    trained_since_sync_ = true;
    shm_published_ = false;
    try {
      pool_.restart(learner_hosts());
      if (colocated(c_)) {  // the restarted slots hosted rollout ranks too
        for (const WorkerId& worker : learner_hosts()) {
          if (worker.rank < static_cast<uint32_t>(c_.rollout.workers)) init_rollout(worker);
        }
      }
      init_learners(learner_hosts());
      const std::optional<CheckpointRef> checkpoint = newest_whole_checkpoint(run_dir_);
      if (checkpoint && snapshot_ && checkpoint->step > snapshot_->step) snapshot_.reset();  // died before the snapshot
      if (const std::optional<int64_t> step = restore_snapshot()) {
        std::fprintf(stderr, "tandem: the learners are back at step %lld from their snapshot in memory\n",
                     static_cast<long long>(*step));
        return *step;
      }
      std::fprintf(stderr, "tandem: the learners go back to %s\n",
                   checkpoint ? fmt::format("the step {} checkpoint", checkpoint->step).c_str() : "the start");
      return restore(checkpoint);
    } catch (const LearnerLost& again) {
      last = again.failure();  // lost again while recovering
    } catch (const WorkerFailure& again) {
      const std::optional<WorkerFailure> dead = again.command_error() ? death_behind(again) : again;
      if (!dead) throw again;
      if (hosts_learner(dead->worker())) {
        last = *dead;
      } else {  // a rollout-only worker died meanwhile: restart it, then the learners' recovery again
        try {
          restart_rollout(*dead, /*load_weights=*/false);
          count = false;
        } catch (const LearnerLost& lost_again) {  // a learner died while it restarted
          last = lost_again.failure();
        }
      }
    }
  }
}

void TrainingLoop::export_policy() {
  // A reward model is a sequence classifier (Trainer::export_policy writes it so).
  const std::string dir = run_dir_ + (reward_model() ? "/reward_model" : "/policy");
  const std::string config_extra = reward_model() ? reward_model_export_config() : "";
  call_learners("learner_export", learner_client::export_body(dir, model_dir_, c_.model.dtype, config_extra));
}

}  // namespace tandem::training
