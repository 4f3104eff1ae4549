// learner.snapshot: after every step each learner rank copies its state (weights or shard,
// optimizer moments, step counters) into its host's memory (learner.snapshot_dir, a tmpfs),
// while the rollout workers generate the next step. When a learner dies, the restarted
// ranks load the newest whole snapshot and the run redoes only the step in progress,
// instead of replaying every step since the last checkpoint.
//
// The snapshot of step N is whole once every rank answered; until then the one of step
// N - 1 stays: the two live in two slots, used in turn, each a file per rank that keeps
// its memory from one use to the next. Snapshots live outside the run directory and die
// with the run: the workers remove theirs when they end on their own, the controller its
// host's when it ends, and a controller starting removes those whose controller is gone.
#include "controller/loop/training_loop_impl.h"

#include "controller/workers/learner_client.h"
#include "core/error.h"
#include "core/log.h"
#include "core/net_address.h"
#include "core/process.h"
#include "learner/snapshot_names.h"

#include <unistd.h>

#include <filesystem>

namespace tandem::training {

namespace fs = std::filesystem;

std::string snapshot_prefix() { return learner_snapshot_prefix(this_hostname()); }

void TrainingLoop::remove_stale_snapshots() const {
  if (c_.learner.snapshot != "memory") return;
  std::error_code error;
  const std::string prefix = snapshot_prefix();
  for (const auto& entry : fs::directory_iterator(c_.learner.snapshot_dir, error)) {
    const std::string name = entry.path().filename();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (process_alive(static_cast<pid_t>(std::stol(pid)))) continue;
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
    log::info("removed the learner snapshots of a controller that is gone: {}", entry.path().string());
  }
}

int TrainingLoop::snapshot_source_rank(size_t rank) const {
  // Sharded ranks, and tensor-parallel ones (each holds its own part of the model), write their own.
  if (c_.learner.sharding != "ddp" || c_.learner.tensor_parallel > 1) return static_cast<int>(rank);
  // ddp ranks hold the same state: the first rank of each host writes it for the host.
  const std::vector<WorkerId> hosts = learner_hosts();
  const WorkerStatus& mine = pool_.worker_status(hosts[rank]);
  for (size_t r = 0; r < rank; ++r) {
    const WorkerStatus& other = pool_.worker_status(hosts[r]);
    if (other.hostname == mine.hostname && other.address == mine.address) return static_cast<int>(r);
  }
  return static_cast<int>(rank);
}

// Two slots, used in turn: step N's snapshot overwrites step N - 2's, never the whole one
// of step N - 1 that recovery may still need.
std::string TrainingLoop::snapshot_body(int64_t step, size_t rank) const {
  return learner_client::snapshot_body(fmt::format("{}/slot_{}", snapshot_root_, step % 2), snapshot_root_ + "/reference",
                                       snapshot_root_, step, snapshot_source_rank(rank));
}

void TrainingLoop::begin_snapshot(int64_t step) {
  if (snapshot_root_.empty()) return;
  TANDEM_CHECK(!writing_snapshot_, "step {}: a snapshot is still being written", step);
  LearnerSnapshot s;
  s.step = step;
  s.position = order_->position();
  s.prefetched = prefetched_;
  s.kl_coef = kl_controller_.coef();
  const std::vector<WorkerId> hosts = learner_hosts();
  try {
    for (size_t r = 0; r < hosts.size(); ++r) {
      s.requests.push_back(pool_.send(hosts[r], "learner_snapshot", snapshot_body(step, r)));
    }
  } catch (const WorkerFailure& failure) {  // a learner found dead already
    for (uint64_t id : s.requests) pool_.forget(id);
    if (hosts_learner(failure.worker())) throw LearnerLost(failure);
    throw;
  }
  writing_snapshot_ = std::move(s);
}

void TrainingLoop::finish_snapshot() {
  if (!writing_snapshot_) return;
  LearnerSnapshot s = std::move(*writing_snapshot_);
  writing_snapshot_.reset();  // a death while waiting: the snapshot before this one is the whole one
  std::vector<Request> requests;
  const std::vector<WorkerId> hosts = learner_hosts();
  for (size_t r = 0; r < hosts.size(); ++r) {
    // A request is never sent again: a learner restarted meanwhile is a LearnerLost.
    requests.push_back({hosts[r], s.requests[r], []() -> uint64_t { throw Error("learner_snapshot: request lost"); }});
  }
  try {
    wait_for(std::move(requests));
  } catch (const WorkerFailure& failure) {
    if (!failure.command_error()) throw;
    // A rank could not write its snapshot (the tmpfs full, say): nothing is lost, a
    // learner's death goes back to the last checkpoint as before.
    for (uint64_t id : s.requests) pool_.forget(id);
    log::warn("learner snapshots are off for the rest of the run: {} (a learner's death now restarts from the "
              "last checkpoint; learner.snapshot_dir {} may be too small, or set learner.snapshot: off)",
              failure.what(), c_.learner.snapshot_dir);
    snapshot_root_.clear();
    snapshot_.reset();
    return;
  }
  s.requests.clear();
  snapshot_ = std::move(s);
}

void TrainingLoop::keep_answered_snapshot() {
  if (!writing_snapshot_) return;
  // Every rank answered before the death: the snapshot is whole, though not yet waited for.
  bool whole = true;
  for (uint64_t id : writing_snapshot_->requests) whole = whole && pool_.answered(id);
  if (whole) {
    for (uint64_t id : writing_snapshot_->requests) pool_.forget(id);
    writing_snapshot_->requests.clear();
    snapshot_ = std::move(writing_snapshot_);
  }
  writing_snapshot_.reset();
}

std::optional<int64_t> TrainingLoop::restore_snapshot() {
  if (!snapshot_) return std::nullopt;
  std::vector<Request> loads;
  const std::vector<WorkerId> hosts = learner_hosts();
  for (size_t r = 0; r < hosts.size(); ++r) {
    loads.push_back(request(hosts[r], "learner_load_snapshot", snapshot_body(snapshot_->step, r)));
  }
  const std::vector<CommandReply> replies = collect(std::move(loads));
  for (size_t r = 0; r < replies.size(); ++r) {
    const learner_client::SnapshotLoaded loaded = learner_client::read_snapshot_loaded(replies[r]);
    if (!loaded.loaded) {
      log::warn("learner rank {} cannot load the step {} snapshot ({}); going back to the last checkpoint", r,
                snapshot_->step, loaded.problem);
      snapshot_.reset();
      return std::nullopt;
    }
  }
  const int64_t step = snapshot_->step;
  prefetched_ = snapshot_->prefetched;
  order_->restore(snapshot_->position);
  if (c_.algorithm.kl.adaptive) kl_controller_.set_coef(snapshot_->kl_coef);
  log::info("the learners are back at step {} (their snapshot in memory)", step);
  continue_from(step);
  return step;
}

}  // namespace tandem::training
