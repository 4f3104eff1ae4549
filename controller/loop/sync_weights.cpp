// Weight sync from the learners to the rollout workers, over the configured transport
// (weight_sync/transport.h): the colocated slot 0 takes learner rank 0's weights in
// memory; the other rollout workers read a shm (or cuda_ipc) mailbox or join a broadcast
// group (collective, nccl) with learner rank 0 as its sender.
#include "controller/loop/training_loop_impl.h"

#include "controller/workers/learner_client.h"
#include "controller/workers/rollout_client.h"
#include "core/log.h"
#include "weight_sync/collective.h"
#include "weight_sync/reshard.h"

#include <filesystem>

namespace tandem::training {

namespace fs = std::filesystem;

namespace {

// A rollout_load_weights reply must say the version that was sent.
void check_loaded(const WorkerId& worker, const CommandReply& reply, int64_t expected) {
  const int64_t loaded = rollout_client::loaded_version(reply);
  TANDEM_CHECK(loaded == expected, "{} loaded weight version {}, expected {}", worker.name(), loaded, expected);
}

}  // namespace

bool TrainingLoop::mailbox_transport() const {
  const std::string method = transport_options().method;
  return method == "shm" || method == "cuda_ipc";
}

WeightSyncOptions TrainingLoop::transport_options() const {
  WeightSyncOptions o;
  // auto: shared memory on one host; across hosts a Gloo broadcast (shm cannot cross).
  if (c_.weight_sync.method != "auto") {
    o.method = c_.weight_sync.method;
  } else {
    o.method = workers_on_one_host() ? "shm" : "collective";
  }
  o.bucket_bytes = c_.weight_sync.bucket_mb << 20;
  o.timeout_s = c_.weight_sync.timeout_s;
  if (o.method == "shm" || o.method == "cuda_ipc") o.address = shm_name_;
  // Split learners or engines: each learner shard sends each engine shard its slices
  // (weight_sync/reshard.h), through a shm segment per pair on one host or a Gloo group per
  // pair across hosts; nothing is gathered. Colocated, a learner shard's process also hosts
  // a receiving rollout worker, which cannot take a broadcast while its learner sends one:
  // there (and over the GPU transports) learner rank 0 sends whole tensors, which each
  // engine rank then cuts. (LoRA moves only its adapters, whole: a few MB at most.)
  const bool reshards_here = o.method == "shm" || (o.method == "collective" && !colocated(c_));
  if (reshards_here && (c_.learner.tensor_parallel > 1 || c_.rollout.tensor_parallel > 1) &&
      !c_.learner.lora.enabled()) {
    o.reshard_sources = static_cast<int>(c_.learner.tensor_parallel);
    o.reshard_destinations = static_cast<int>(c_.rollout.tensor_parallel);
  }
  return o;
}

void TrainingLoop::sync_weights(int64_t version, bool rewind) {
  const bool local = colocated(c_);
  std::vector<int64_t> receivers;  // rollout ranks that take the weights through the transport
  for (int64_t r = local ? 1 : 0; r < c_.rollout.workers; ++r) receivers.push_back(r);
  if (mailbox_transport() || receivers.empty()) {
    sync_through_mailbox(version, rewind, !receivers.empty());
  } else {
    sync_through_group(version, rewind, receivers, local);
  }
  synced_ = true;
  trained_since_sync_ = false;
}

void TrainingLoop::sync_through_mailbox(int64_t version, bool rewind, bool through_transport) {
  const bool local = colocated(c_);
  const WeightSyncOptions transport = transport_options();
  if (transport.reshard_sources > 0 && through_transport && !shm_published_) {
    log::info("weight sync: shm between tensor-parallel layouts, {} learner shards -> {} per engine; each pair "
              "moves only the slices its engine rank holds (weight_sync/reshard.h)",
              transport.reshard_sources, transport.reshard_destinations);
  }
  publishing_ = true;  // a rollout worker restarted meanwhile gets this version in the load below
  last_sync_bytes_ = 0;
  for (const CommandReply& reply :
       call_learners("learner_publish", learner_client::publish_body(version, local, through_transport ? &transport : nullptr))) {
    last_sync_bytes_ += learner_client::published_bytes(reply);
  }
  publishing_ = false;
  weight_version_ = version;
  shm_published_ = through_transport;
  std::vector<Request> requests;
  for (int64_t r = 0; r < c_.rollout.workers; ++r) {
    std::string body = local && r == 0 ? rollout_client::load_local_body(rewind)
                                       : rollout_client::load_transport_body(transport, rewind);
    requests.push_back(request(rollout_worker(c_, r), "rollout_load_weights", std::move(body)));
  }
  for (const CommandReply& reply : collect(std::move(requests))) check_loaded(reply.reply.worker, reply, version);
}

void TrainingLoop::sync_through_group(int64_t version, bool rewind, const std::vector<int64_t>& receivers,
                                      bool local) {
  while (true) {
    if (group_ && (group_->receivers != receivers)) group_.reset();
    if (!group_) {
      WeightGroup group;
      group.receivers = receivers;
      group.options = transport_options();
      group.options.world_size = static_cast<int>(receivers.size()) + 1;
      group.options.address = fmt::format("{}/weight_sync/group-{}", fs::absolute(run_dir_).string(), ++groups_made_);
      if (group.options.method == "nccl") {
        // Learner rank 0 makes the id and stays its bootstrap root; the id travels to the
        // receivers in their load commands.
        const auto replies = collect({request(learner_worker(c_, 0), "learner_nccl_id", learner_client::nccl_id_body())});
        group.options.nccl_unique_id = learner_client::read_nccl_id(replies[0]);
      }
      log::info("weight sync: new {} group of {} ranks ({})", group.options.method, group.options.world_size,
                group.options.address);
      if (group.options.reshard_sources > 0) {
        log::info("weight sync: collective between tensor-parallel layouts, {} learner shards -> {} per engine; a "
                  "group per (learner shard, engine rank) pair moves only that engine rank's slices "
                  "(weight_sync/reshard.h)",
                  group.options.reshard_sources, group.options.reshard_destinations);
      }
      group_ = std::move(group);
    }
    std::vector<uint64_t> attempt;
    try {
      send_group_sync(version, rewind, local, attempt);
    } catch (const WorkerFailure& failure) {
      // A group that failed is never used again (weight_sync/broadcast_protocol.h). Ranks
      // still waiting for the dead one to join give up at once.
      if (group_->options.method == "collective") {
        for (const std::string& address : rendezvous_addresses(group_->options)) abandon_collective_rendezvous(address);
      }
      group_.reset();
      recover_group_member(failure, receivers);
      drain_attempt(attempt, receivers);
      continue;  // the whole sync again, in a new group
    }
    std::error_code ignored;
    if (!group_->used) {  // every rank has connected
      for (const std::string& address : rendezvous_addresses(group_->options)) fs::remove_all(address, ignored);
    }
    group_->used = true;
    weight_version_ = version;
    return;
  }
}

void TrainingLoop::send_group_sync(int64_t version, bool rewind, bool local, std::vector<uint64_t>& ids) {
  WeightSyncOptions options = group_->options;
  // All at once: the publish returns only when every receiver has checked every bucket.
  // Learner rank 0 sends (resharding: each learner shard sends its pairs' streams from its
  // own address).
  for (const WorkerId& worker : learner_hosts()) {
    options.host = pool_.worker_status(worker).address;
    ids.push_back(pool_.send(worker, "learner_publish", learner_client::publish_body(version, local, &options)));
  }
  std::vector<std::pair<WorkerId, uint64_t>> loads;
  for (size_t i = 0; i < group_->receivers.size(); ++i) {
    options.rank = static_cast<int>(i) + 1;
    // nccl: a GPU per process, the same in every group: learner rank 0 on GPU 0, rollout
    // rank r on GPU r + 1 (colocated: on its slot's GPU r).
    const int64_t rollout_rank = group_->receivers[i];
    if (options.method == "nccl") options.cuda_device = static_cast<int>(rollout_rank + (colocated(c_) ? 0 : 1));
    const WorkerId worker = rollout_worker(c_, rollout_rank);
    options.host = pool_.worker_status(worker).address;
    loads.emplace_back(worker, pool_.send(worker, "rollout_load_weights", rollout_client::load_transport_body(options, rewind)));
  }
  if (local) {
    const WorkerId worker = rollout_worker(c_, 0);
    loads.emplace_back(worker, pool_.send(worker, "rollout_load_weights", rollout_client::load_local_body(rewind)));
  }
  for (const auto& [worker, id] : loads) ids.push_back(id);
  auto replies = pool_.wait(ids);
  for (const auto& [worker, id] : loads) check_loaded(worker, replies.at(id), version);
  last_sync_bytes_ = 0;
  for (size_t i = 0; i < learner_hosts().size(); ++i) last_sync_bytes_ += learner_client::published_bytes(replies.at(ids[i]));
}

std::vector<std::string> TrainingLoop::rendezvous_addresses(const WeightSyncOptions& options) {
  std::vector<std::string> addresses{options.address};
  for (int s = 0; s < options.reshard_sources; ++s) {
    for (int d = 0; d < options.reshard_destinations; ++d) addresses.push_back(reshard_segment_name(options.address, s, d));
  }
  return addresses;
}

void TrainingLoop::drain_attempt(const std::vector<uint64_t>& ids, const std::vector<int64_t>& group_members) {
  for (uint64_t id : ids) {
    while (pool_.has_request(id)) {  // false once answered, or once its worker was restarted
      try {
        pool_.wait({id});
      } catch (const WorkerFailure& failure) {
        if (failure.command_error()) {  // how a command of the failed group usually ends
          pool_.forget(id);
          break;
        }
        recover_group_member(failure, group_members);  // another death meanwhile
      }
    }
  }
}

void TrainingLoop::recover_group_member(const WorkerFailure& failure, const std::vector<int64_t>& group_members) {
  std::optional<WorkerFailure> dead;
  if (!failure.command_error()) dead = failure;
  if (!dead) {
    // A member that died shows first as the transport error of the others ("broadcast
    // failed"): give the pool a moment to see the death behind it.
    pool_.poll_events(0.5);
    dead = pool_.first_failure();
  }
  if (!dead) throw failure;  // a real error: the same sync would fail again
  if (hosts_learner(dead->worker())) throw LearnerLost(*dead);
  // A member gets its weights from the sync, redone; a rollout worker outside the group
  // (it died meanwhile) gets them now.
  const bool member = std::find(group_members.begin(), group_members.end(),
                                static_cast<int64_t>(dead->worker().rank)) != group_members.end();
  restart_rollout(*dead, /*load_weights=*/!member);
}

// The weights the other rollout workers hold, for a restarted one.
void TrainingLoop::load_current_weights(const WorkerId& worker) {
  if (mailbox_transport()) {
    if (!shm_published_) return;  // the model directory's weights, which rollout_init loaded
    if (publishing_) return;       // the segment is being rewritten: the sync in progress delivers
    const std::string body = rollout_client::load_transport_body(transport_options(), true);
    const auto replies = pool_.wait({pool_.send(worker, "rollout_load_weights", body)});
    check_loaded(worker, replies.begin()->second, weight_version_);
    return;
  }
  if (!synced_) return;  // rollout_init loaded the model directory, as the others did
  // The worker died during an update (noticed while waiting for the learners): the sync
  // after it delivers the new weights to every rollout worker.
  if (trained_since_sync_) return;
  // A group transport has no mailbox to read: the learners, which still hold
  // weight_version_, publish again to this worker alone.
  sync_through_group(weight_version_, /*rewind=*/true, {static_cast<int64_t>(worker.rank)}, /*local=*/false);
}

}  // namespace tandem::training
