// The controller's side of the learner worker's commands (learner/learner_commands.capnp):
// command bodies built from typed arguments, replies read back and checked, so that the
// training loop never touches the wire format.
#pragma once

#include "controller/workers/worker_pool.h"
#include "learner/train_batch.h"
#include "weight_sync/transport.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem::learner_client {

struct InitArgs {
  std::string config_yaml, model_dir;
  int64_t sampled_vocab_size = 0;
  int64_t total_optimizer_steps = 1;
  std::string rendezvous;  // "" with one rank
  int rank = 0, world_size = 1, local_rank = 0, threads = 0;
  std::string host;  // the rank's address as it registered
  bool reward_model = false;  // tandem train-rm
};
std::string init_body(const InitArgs& args);

// A body (and its two frames) carrying a training batch: learner_train's per mini-batch
// shares, or one mini-batch for learner_values, learner_logprobs, learner_probe_logprobs, learner_ref_logprobs.
struct BatchCommand {
  std::string body;
  std::vector<std::string> attachments;
};
BatchCommand batch_command(const std::vector<std::vector<TrainingSample>>& mini_batches);
BatchCommand sft_command(const std::vector<TrainingSample>& samples, double lr);

struct TrainResult {
  std::vector<std::pair<std::string, double>> metrics;  // actor/pg_loss, ... as UpdateMetrics::entries()
  int64_t optimizer_steps = 0;
  int64_t tokens = 0;
};
TrainResult read_train(const CommandReply& reply);

struct SftResult {
  double loss = 0, grad_norm = 0;
  int64_t tokens = 0;
};
SftResult read_sft(const CommandReply& reply);

// learner_publish: `local` also hands the weights to the rollout engine in the learner's
// process; `transport` (may be null) sends them over it.
std::string publish_body(int64_t version, bool local, const WeightSyncOptions* transport);
// The stream bytes a learner_publish reply says its rank sent (0 for ranks that send nothing).
int64_t published_bytes(const CommandReply& reply);

std::string free_port_body(const std::string& host);
int read_free_port(const CommandReply& reply);

std::string nccl_id_body();
std::string read_nccl_id(const CommandReply& reply);  // the raw unique id

std::string save_body(const std::string& dir, const std::string& tokenizer_from);
std::string load_body(const std::string& dir);
// learner_snapshot and learner_load_snapshot (learner.snapshot).
// `dir`: the slot the snapshot of run step `step` is written to (or read from);
// `source_rank`: the rank whose file holds the receiving rank's state (itself, or the
// first ddp rank on its host: a rank whose source is another writes nothing).
std::string snapshot_body(const std::string& dir, const std::string& reference_dir, const std::string& root,
                          int64_t step, int source_rank);
struct SnapshotLoaded {
  bool loaded = false;
  std::string problem;  // why not
};
SnapshotLoaded read_snapshot_loaded(const CommandReply& reply);
// learner_export; `config_extra`: a JSON object whose keys config.json gets too ("": none).
std::string export_body(const std::string& dir, const std::string& tokenizer_from, const std::string& dtype,
                        const std::string& config_extra = "");

}  // namespace tandem::learner_client
