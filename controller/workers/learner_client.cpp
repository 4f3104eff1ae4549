#include "controller/workers/learner_client.h"

#include "core/command_codec.h"
#include "core/worker_commands.capnp.h"
#include "learner/learner_commands.capnp.h"
#include "learner/sample_codec.h"
#include "weight_sync/options_wire.h"

namespace tandem::learner_client {

namespace {

std::string reply_what(const char* command, const CommandReply& reply) {
  return fmt::format("{} reply from {}", command, reply.reply.worker.name());
}

}  // namespace

std::string init_body(const InitArgs& a) {
  return encode_body<wire::LearnerInit>([&](wire::LearnerInit::Builder out) {
    out.setConfig(a.config_yaml);
    out.setModel(a.model_dir);
    out.setSampledVocabSize(a.sampled_vocab_size);
    out.setTotalOptimizerSteps(a.total_optimizer_steps);
    out.setRendezvous(a.rendezvous);
    out.setRank(a.rank);
    out.setWorldSize(a.world_size);
    out.setHost(a.host);
    out.setLocalRank(a.local_rank);
    out.setThreads(a.threads);
    out.setRewardModel(a.reward_model);
  });
}

BatchCommand batch_command(const std::vector<std::vector<TrainingSample>>& mini_batches) {
  EncodedBatch encoded = encode_training_batch(mini_batches);
  return {std::move(encoded.body), std::move(encoded.attachments)};
}

BatchCommand sft_command(const std::vector<TrainingSample>& samples, double lr) {
  BatchFrames frames;
  std::string body = encode_body<wire::LearnerSft>([&](wire::LearnerSft::Builder out) {
    frames = write_training_batch(out.initBatch(), {samples});
    out.setLr(lr);
  });
  return {std::move(body), frames.attachments()};
}

TrainResult read_train(const CommandReply& reply) {
  const Body<wire::TrainResult> body(reply.reply.body, reply_what("learner_train", reply));
  TrainResult out;
  for (const auto metric : body->getMetrics()) out.metrics.emplace_back(to_string(metric.getName()), metric.getValue());
  out.optimizer_steps = body->getOptimizerSteps();
  out.tokens = body->getTokens();
  return out;
}

SftResult read_sft(const CommandReply& reply) {
  const Body<wire::SftResult> body(reply.reply.body, reply_what("learner_sft", reply));
  return {body->getLoss(), body->getGradNorm(), body->getTokens()};
}

std::string publish_body(int64_t version, bool local, const WeightSyncOptions* transport) {
  return encode_body<wire::LearnerPublish>([&](wire::LearnerPublish::Builder out) {
    out.setVersion(version);
    out.setLocal(local);
    if (transport) write_weight_sync_transport(out.initTransport(), *transport);
  });
}

int64_t published_bytes(const CommandReply& reply) {
  const Body<wire::Published> body(reply.reply.body, reply_what("learner_publish", reply));
  return body->getBytes();
}

std::string free_port_body(const std::string& host) {
  return encode_body<wire::FreePortRequest>([&](wire::FreePortRequest::Builder out) { out.setHost(host); });
}

int read_free_port(const CommandReply& reply) {
  return Body<wire::FreePort>(reply.reply.body, reply_what("learner_free_port", reply))->getPort();
}

std::string nccl_id_body() { return empty_body<wire::Empty>(); }

std::string read_nccl_id(const CommandReply& reply) {
  return to_string(Body<wire::NcclId>(reply.reply.body, reply_what("learner_nccl_id", reply))->getUniqueId());
}

std::string save_body(const std::string& dir, const std::string& tokenizer_from) {
  return encode_body<wire::CheckpointRequest>([&](wire::CheckpointRequest::Builder out) {
    out.setDir(dir);
    out.setTokenizerFrom(tokenizer_from);
  });
}

std::string load_body(const std::string& dir) {
  return encode_body<wire::CheckpointRequest>([&](wire::CheckpointRequest::Builder out) { out.setDir(dir); });
}

std::string snapshot_body(const std::string& dir, const std::string& reference_dir, const std::string& root,
                          int64_t step, int source_rank) {
  return encode_body<wire::SnapshotRequest>([&](wire::SnapshotRequest::Builder out) {
    out.setDir(dir);
    out.setReferenceDir(reference_dir);
    out.setRoot(root);
    out.setStep(step);
    out.setSourceRank(source_rank);
  });
}

SnapshotLoaded read_snapshot_loaded(const CommandReply& reply) {
  const Body<wire::SnapshotLoaded> body(reply.reply.body, reply_what("learner_load_snapshot", reply));
  return {body->getLoaded(), to_string(body->getProblem())};
}

std::string export_body(const std::string& dir, const std::string& tokenizer_from, const std::string& dtype,
                        const std::string& config_extra) {
  return encode_body<wire::ExportRequest>([&](wire::ExportRequest::Builder out) {
    out.setDir(dir);
    out.setConfigExtra(config_extra);
    out.setTokenizerFrom(tokenizer_from);
    out.setDtype(dtype);
  });
}

}  // namespace tandem::learner_client
