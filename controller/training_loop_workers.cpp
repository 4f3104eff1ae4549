// The training loop's side that deals with worker processes: starting them, commands
// that survive a worker's death (collect), weight sync, checkpoints, restore, recovery.
#include "controller/training_loop_impl.h"

#include "core/files.h"
#include "core/log.h"
#include "weight_sync/shm.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

namespace tandem::training {

namespace fs = std::filesystem;

// Workers get the config with thread counts that share this host's cores among them.
std::string TrainingLoop::config_for_workers() const {
  Config c = c_;
  if (c.rollout.threads == 0) c.rollout.threads = std::max<int64_t>(1, host_cores() / c.rollout.workers);
  return config_to_yaml(c);
}

void TrainingLoop::init_rollout(const WorkerId& worker) {
  pool_.wait({pool_.send(worker, "rollout_init",
                         nlohmann::json{{"model", model_dir_}, {"config", config_for_workers()}}.dump())});
}

void TrainingLoop::init_learners(const std::vector<WorkerId>& workers) {
  const std::string config_text = config_for_workers();
  const int64_t optimizer_steps = c_.experiment.steps * c_.learner.epochs * c_.learner.mini_batches;
  const std::string rendezvous = fmt::format("file://{}/.rendezvous-{}-{}", run_dir_, ::getpid(), restarts_);
  std::vector<uint64_t> pending;
  for (int64_t r = 0; r < c_.learner.workers; ++r) {
    nlohmann::json body = {{"model", model_dir_},
                           {"config", config_text},
                           {"rank", r},
                           {"world_size", c_.learner.workers},
                           {"rendezvous", c_.learner.workers > 1 ? rendezvous : std::string()},
                           {"total_optimizer_steps", optimizer_steps},
                           {"threads", c_.learner.threads > 0 ? c_.learner.threads
                                                              : std::max<int64_t>(1, host_cores() / c_.learner.workers)}};
    pending.push_back(pool_.send(workers[static_cast<size_t>(r)], "learner_init", body.dump()));
  }
  pool_.wait(pending);
  fs::remove(rendezvous.substr(7));
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
  for (int64_t r = 0; r < c_.rollout.workers; ++r) init_rollout(rollout_worker(c_, r));
  init_learners(learner_hosts());
}

void TrainingLoop::count_restart(const WorkerFailure& failure) {
  if (restarts_ >= c_.launcher.max_restarts) {
    throw Error(fmt::format("{}; not restarting it: the run has used all {} restarts (launcher.max_restarts)",
                            failure.what(), c_.launcher.max_restarts));
  }
  ++restarts_;
}

void TrainingLoop::restart_rollout(const WorkerFailure& failure) {
  WorkerFailure last = failure;
  while (true) {
    count_restart(last);
    log::warn("{}; restarting it ({} of {} restarts)", last.what(), restarts_, c_.launcher.max_restarts);
    try {
      pool_.restart(last.worker());
      init_rollout(last.worker());
      load_current_weights(last.worker());
      return;
    } catch (const WorkerFailure& again) {
      if (again.command_error() || hosts_learner(again.worker())) throw;
      last = again;  // the new process died too
    }
  }
}

// The weights the other rollout workers hold, for a restarted one.
void TrainingLoop::load_current_weights(const WorkerId& worker) {
  if (!shm_published_) return;  // the model directory's weights, which rollout_init loaded
  if (publishing_) return;       // the segment is being rewritten: the sync in progress delivers
  const auto replies = pool_.wait(
      {pool_.send(worker, "rollout_load_weights", nlohmann::json{{"shm", shm_name_}, {"rewind", true}}.dump())});
  const int64_t loaded = nlohmann::json::parse(replies.begin()->second.reply.body).at("version").get<int64_t>();
  TANDEM_CHECK(loaded == weight_version_, "{} loaded weight version {}, expected {}", worker.name(), loaded,
               weight_version_);
}

std::vector<CommandReply> TrainingLoop::collect(std::vector<Request> requests) {
  for (Request& r : requests) r.id = r.send();
  while (true) {
    std::vector<uint64_t> ids;
    for (const Request& r : requests) ids.push_back(r.id);
    try {
      auto replies = pool_.wait(ids);
      std::vector<CommandReply> out;
      for (const Request& r : requests) out.push_back(std::move(replies.at(r.id)));
      return out;
    } catch (const WorkerFailure& failure) {
      if (failure.command_error()) throw;  // it would fail again
      if (hosts_learner(failure.worker())) throw LearnerLost(failure);
      restart_rollout(failure);
      for (Request& r : requests) {
        if (r.worker == failure.worker()) r.id = r.send();  // its unfinished work, redone
      }
    }
  }
}

Request TrainingLoop::request(const WorkerId& worker, const std::string& command, const std::string& body,
                              const std::vector<std::string>& attachments) {
  return {worker, 0, [this, worker, command, body, attachments] {
            return pool_.send(worker, command, body, attachments);
          }};
}

std::vector<CommandReply> TrainingLoop::call_learners(const std::string& command, const std::string& body) {
  std::vector<Request> requests;
  for (const WorkerId& worker : learner_hosts()) requests.push_back(request(worker, command, body));
  return collect(std::move(requests));
}

void TrainingLoop::sync_weights(int64_t version, bool rewind) {
  // The colocated slot 0 takes learner rank 0's weights in memory; everyone else reads shm.
  const bool local = colocated(c_);
  const bool shm = !local || c_.rollout.workers > 1;
  nlohmann::json publish = {{"version", version}, {"bucket_bytes", c_.weight_sync.bucket_mb << 20}};
  if (local) publish["local"] = true;
  if (shm) publish["shm"] = shm_name_;
  publishing_ = true;  // a rollout worker restarted meanwhile gets this version in the load below
  call_learners("learner_publish", publish.dump());
  publishing_ = false;
  weight_version_ = version;
  shm_published_ = shm;
  std::vector<Request> requests;
  for (int64_t r = 0; r < c_.rollout.workers; ++r) {
    const WorkerId worker = rollout_worker(c_, r);
    nlohmann::json load = local && r == 0 ? nlohmann::json{{"local", true}} : nlohmann::json{{"shm", shm_name_}};
    if (rewind) load["rewind"] = true;
    const std::string body = load.dump();
    requests.push_back(request(worker, "rollout_load_weights", body));
  }
  for (const CommandReply& reply : collect(std::move(requests))) {
    const int64_t loaded = nlohmann::json::parse(reply.reply.body).at("version").get<int64_t>();
    TANDEM_CHECK(loaded == version, "{} loaded weight version {}, expected {}", reply.reply.worker.name(), loaded,
                 version);
  }
}

void TrainingLoop::checkpoint(int64_t step) {
  const std::string dir = fmt::format("{}/checkpoints/step_{}", run_dir_, step);
  fs::create_directories(run_dir_ + "/checkpoints");
  call_learners("learner_save", nlohmann::json{{"dir", dir}}.dump());
  const PromptOrder::Position position = order_->position();
  write_file_atomic(dir + "/controller_state.json",
                    nlohmann::json{{"step", step}, {"data_epoch", position.epoch}, {"data_index", position.index}}
                            .dump(2) +
                        "\n");
  write_checkpoint_manifest(dir);  // last: only now is the checkpoint usable
  prune_checkpoints(run_dir_, c_.experiment.keep_checkpoints);
}

int64_t TrainingLoop::restore(const std::optional<CheckpointRef>& checkpoint) {
  int64_t step = 0;
  order_.emplace(data_.rows.size(), static_cast<uint64_t>(c_.experiment.seed), c_.data.shuffle);
  if (checkpoint) {
    call_learners("learner_load", nlohmann::json{{"dir", checkpoint->dir}}.dump());
    const std::string state_path = checkpoint->dir + "/controller_state.json";
    const nlohmann::json state = nlohmann::json::parse(read_file(state_path).value());
    step = state.at("step").get<int64_t>();
    order_->restore({state.at("data_epoch").get<int64_t>(), state.at("data_index").get<int64_t>()});
    log::info("restored {} (step {})", checkpoint->dir, step);
  } else {
    warm_up();
  }
  const std::string metrics_path = run_dir_ + "/metrics.jsonl";
  metrics_.reset();  // truncation replaces the file: reopen after it
  truncate_metrics(metrics_path, step);
  metrics_ = std::make_unique<MetricsWriter>(c_.logging.jsonl ? metrics_path : "");
  sync_weights(step, /*rewind=*/true);
  return step;
}

int64_t TrainingLoop::recover_learners(const LearnerLost& lost) {
  WorkerFailure last = lost.failure();
  while (true) {
    count_restart(last);
    log::warn("{}; restarting the learners from the last checkpoint ({} of {} restarts)", last.what(), restarts_,
              c_.launcher.max_restarts);
    std::fprintf(stderr, "\ntandem: %s\ntandem: restarting the learners from the last checkpoint\n", last.what());
    try {
      for (const WorkerId& worker : learner_hosts()) pool_.restart(worker);
      if (colocated(c_)) {  // the restarted slots hosted rollout ranks too
        for (const WorkerId& worker : learner_hosts()) {
          if (worker.rank < static_cast<uint32_t>(c_.rollout.workers)) init_rollout(worker);
        }
      }
      init_learners(learner_hosts());
      return restore(newest_whole_checkpoint(run_dir_));
    } catch (const LearnerLost& again) {
      last = again.failure();  // lost again while recovering
    } catch (const WorkerFailure& again) {
      if (again.command_error()) throw;
      last = again;
    }
  }
}

void TrainingLoop::export_policy() {
  call_learners("learner_export",
                nlohmann::json{{"dir", run_dir_ + "/policy"}, {"tokenizer_from", model_dir_}}.dump());
}

}  // namespace tandem::training
