#include "learner/learner_role.h"

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "core/config.h"
#include "core/command_codec.h"
#include "core/error.h"
#include "core/worker_commands.capnp.h"
#include "core/worker_runtime.h"
#include "core/net_address.h"
#include "learner/collectives.h"
#include "learner/learner_commands.capnp.h"
#include "learner/learner_device.h"
#include "learner/sample_codec.h"
#include "learner/snapshot_names.h"
#include "learner/trainer.h"
#include "weight_sync/local.h"
#include "weight_sync/nccl_id.h"
#include "weight_sync/options_wire.h"
#include "weight_sync/reshard.h"
#include "weight_sync/transport.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <filesystem>
#include <map>
#include <memory>

namespace tandem {

namespace {

// A TrainResult reply: learner_train's and learner_preference_step's.
std::string train_result_body(const std::vector<std::pair<std::string, double>>& entries, int64_t optimizer_steps,
                              int64_t tokens) {
  return encode_body<wire::TrainResult>([&](wire::TrainResult::Builder out) {
    auto list = out.initMetrics(static_cast<unsigned>(entries.size()));
    for (size_t i = 0; i < entries.size(); ++i) {
      list[static_cast<unsigned>(i)].setName(entries[i].first);
      list[static_cast<unsigned>(i)].setValue(entries[i].second);
    }
    out.setOptimizerSteps(optimizer_steps);
    out.setTokens(tokens);
  });
}

// One rank's state between commands; the executor thread runs commands one at a time.
struct LearnerState {
  std::function<void(const Config&)> prepare;
  std::unique_ptr<Collectives> collectives;
  std::unique_ptr<Trainer> trainer;

  KeptEndpoint<WeightSender> sender{make_weight_sender};
  std::map<std::string, std::unique_ptr<WeightSender>> shard_senders;  // resharding: per segment, kept
  ModelConfig model_config;  // as learner_init read it (the layouts derive from it)
  // learner.snapshot: the run's snapshot directory on this host. Removed when the worker
  // ends on its own (the run is over, or its controller is gone), kept when it is killed:
  // the rank that replaces it loads from there. A worker that lost its controller keeps
  // it on the controller's own host: the controller may only have been paused, and if it
  // is gone the next controller there removes it (elsewhere nobody would).
  std::string snapshot_root;

  ~LearnerState() {
    if (snapshot_root.empty()) return;
    const std::string name = std::filesystem::path(snapshot_root).filename().string();
    if (worker_lost_controller() && name.rfind(learner_snapshot_prefix(this_hostname()), 0) == 0) return;
    std::error_code ignored;  // best effort: a peer rank on this host may be removing it too
    std::filesystem::remove_all(snapshot_root, ignored);
  }

  Trainer& require_trainer(const std::string& command) {
    if (!trainer) throw Error(fmt::format("{}: send learner_init first", command));
    return *trainer;
  }

  CommandResult init(const CommandMsg& command, const std::vector<std::string>&) {
    const Body<wire::LearnerInit> body(command.body, command.name);
    const Config config = load_config_text(to_string(body->getConfig()), "learner_init config").config;
    if (prepare) prepare(config);
    const std::string model_dir = resolve_model_path(to_string(body->getModel()));
    ModelConfig model = read_model_config(model_dir + "/config.json");
    // The tokenizer's size when the checkpoint pads its vocabulary (model_config.h).
    if (const int64_t ids = body->getSampledVocabSize(); ids > 0) limit_to_tokenizer(model, ids, model_dir);
    TrainerOptions options;
    options.learner = config.learner;
    options.algorithm = config.algorithm;
    options.temperature = config.rollout.temperature;
    options.max_response_length = config.rollout.max_new_tokens;
    options.total_optimizer_steps = body->getTotalOptimizerSteps();
    options.reward_model = body->getRewardModel();
    options.seed = static_cast<uint64_t>(config.experiment.seed);
    options.base_model = config.model.path;
    CollectivesOptions group;
    group.rendezvous = to_string(body->getRendezvous());
    group.rank = body->getRank();
    group.world_size = body->getWorldSize();
    if (body->hasHost() && body->getHost().size() > 0) group.host = to_string(body->getHost());  // as the controller saw it register
    // This rank's GPU under learner.device cuda: its index among the learner ranks of its
    // machine (the local launcher puts every rank on one machine: its rank).
    options.local_rank = body->getLocalRank() >= 0 ? body->getLocalRank() : group.rank;
    if (options.learner.device == "auto") {  // the controller resolves it; a direct caller may not
      options.learner.device = resolve_learner_device("auto", options.local_rank, learner_cuda_support()).type;
    }
    group.device = options.learner.device;  // cuda: NCCL on the trainer's GPU; cpu: Gloo
    group.cuda_device = options.local_rank;
    // One intra-op thread per core this rank owns: libtorch's OpenMP threads wait at
    // barriers for each other, and oversubscribed cores make that 50x slower
    // (bench/RESULTS.md, learner_cpu). The controller says how many are ours.
    if (const int threads = body->getThreads(); threads > 0) at::set_num_threads(threads);
    trainer.reset();
    collectives.reset();  // a communicator of an earlier init ends before the next one joins
    collectives = Collectives::create(group);
    trainer = std::make_unique<Trainer>(model, load_model_weights(model_dir, model), options, *collectives);
    model_config = model;
    return {encode_body<wire::LearnerReady>([](wire::LearnerReady::Builder out) { out.setIntraOpThreads(at::get_num_threads()); }),
            {}};
  }

  CommandResult torch_info(const CommandMsg&, const std::vector<std::string>&) {
    return {encode_body<wire::TorchInfo>([](wire::TorchInfo::Builder out) {
              out.setLibtorch(TORCH_VERSION);
              out.setIntraOpThreads(at::get_num_threads());
            }),
            {}};
  }

  CommandResult train(const CommandMsg& command, const std::vector<std::string>& attachments) {
    Trainer& t = require_trainer(command.name);
    const UpdateMetrics metrics = t.train(decode_training_batch(command.body, attachments, command.name));
    return {train_result_body(metrics.entries(), t.optimizer_steps(), metrics.tokens), {}};
  }

  // One supervised warm-up step on one mini-batch; the samples' per-token fields are ignored.
  CommandResult sft(const CommandMsg& command, const std::vector<std::string>& attachments) {
    Trainer& t = require_trainer(command.name);
    const Body<wire::LearnerSft> body(command.body, command.name);
    const auto batches = read_training_batch(body->getBatch(), attachments, command.name);
    if (batches.size() != 1) throw Error("learner_sft: send exactly one mini-batch of samples");
    const UpdateMetrics metrics = t.supervised_step(batches[0], body->getLr());
    return {encode_body<wire::SftResult>([&](wire::SftResult::Builder out) {
              out.setLoss(metrics.objective.loss);
              out.setGradNorm(metrics.grad_norm);
              out.setTokens(metrics.tokens);
            }),
            {}};
  }

  // A reward-model step on this rank's pairs (learner_commands.capnp).
  CommandResult preference_step(const CommandMsg& command, const std::vector<std::string>& attachments) {
    Trainer& t = require_trainer(command.name);
    const auto batches = decode_training_batch(command.body, attachments, command.name);
    if (batches.size() != 1) throw Error(fmt::format("{}: send exactly one mini-batch of pairs", command.name));
    const PreferenceMetrics m = t.preference_step(batches[0]);
    const std::vector<std::pair<std::string, double>> entries = {
        {"rm/loss", m.loss}, {"rm/accuracy", m.accuracy}, {"rm/margin", m.margin},
        {"rm/pairs", m.pairs}, {"rm/grad_norm", m.grad_norm}, {"rm/lr", m.lr}};
    return {train_result_body(entries, t.optimizer_steps(), 0), {}};
  }

  // The reward model's score of each sample: one float32 frame.
  CommandResult reward_scores(const CommandMsg& command, const std::vector<std::string>& attachments) {
    Trainer& t = require_trainer(command.name);
    const auto batches = decode_training_batch(command.body, attachments, command.name);
    if (batches.size() != 1) throw Error(fmt::format("{}: send exactly one mini-batch of samples", command.name));
    const std::vector<float> scores = t.reward_scores(batches[0]);
    return {empty_body<wire::Empty>(),
            {std::string(reinterpret_cast<const char*>(scores.data()), scores.size() * sizeof(float))}};
  }

  // Per response token of this rank's share of the samples (one mini-batch; their
  // per-token fields are ignored): the critic's values, or the policy's log-probs (in
  // the training precision; the probe's in float32, as the rollout engine computes them).
  // One float32 frame, every sample's values back to back.
  CommandResult per_token(const CommandMsg& command, const std::vector<std::string>& attachments) {
    Trainer& t = require_trainer(command.name);
    const auto batches = decode_training_batch(command.body, attachments, command.name);
    if (batches.size() != 1) throw Error(fmt::format("{}: send exactly one mini-batch of samples", command.name));
    const auto values = command.name == "learner_values"           ? t.values(batches[0])
                        : command.name == "learner_ref_logprobs" ? t.reference_logprobs(batches[0])
                                                                 : t.response_logprobs(batches[0], command.name == "learner_probe_logprobs");
    std::string frame;
    for (const std::vector<float>& v : values) frame.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    return {empty_body<wire::Empty>(), {frame}};
  }

  // The current policy for rollout workers: every rank calls (fsdp gathers), rank 0 writes.
  CommandResult publish(const CommandMsg& command, const std::vector<std::string>&) {
    const Body<wire::LearnerPublish> body(command.body, command.name);
    Trainer& t = require_trainer(command.name);
    const int64_t version = body->getVersion();
    const bool root = collectives->rank() == 0;
    PublishStats stats;
    if (body->getLocal()) {
      // The policy (or with LoRA its adapters) as host float32 copies, for the engine in this process.
      LocalWeights local;
      local.version = version;
      t.with_sync_tensors([&](const std::vector<std::pair<std::string, at::Tensor>>& weights) {
        if (!root) return;
        for (const auto& [name, w] : weights) {
          const at::Tensor host = w.to(at::kCPU).contiguous();
          local.tensors.push_back({name, host.sizes().vec()});
          local.data.emplace_back(host.data_ptr<float>(), host.data_ptr<float>() + host.numel());
        }
      });
      if (root) put_local_weights(std::move(local));
    }
    const WeightSyncOptions options =
        body->hasTransport() ? read_weight_sync_transport(body->getTransport(), command.name) : WeightSyncOptions{};
    if (body->hasTransport() && options.reshard_sources > 0) {
      stats = publish_shards(t, version, options);
    } else if (body->hasTransport()) {
      // Sent from where the parameters live: host memory on the CPU, device memory on a GPU
      // (the cuda_ipc and nccl transports copy device to device; no host copy of the weights).
      t.with_sync_tensors([&](const std::vector<std::pair<std::string, at::Tensor>>& weights) {
        if (!root) return;
        std::vector<OutgoingTensor> tensors;
        for (const auto& [name, w] : weights) tensors.push_back({name, w.sizes().vec(), w.data_ptr()});
        stats = sender.for_options(options).publish(version, tensors);
      });
    }
    return {encode_body<wire::Published>([&](wire::Published::Builder out) {
              out.setBytes(stats.bytes);
              out.setBuckets(stats.buckets);
            }),
            {}};
  }

  // Resharding sync (weight_sync/reshard.h): tensor-parallel rank s of replica 0 writes, for
  // each engine rank d, the slices of its own shards that d takes; no rank gathers a tensor.
  PublishStats publish_shards(const Trainer& t, int64_t version, const WeightSyncOptions& options) {
    PublishStats stats;
    const ReshardPlan& plan = cached_reshard_plan(model_config, options.reshard_sources, options.reshard_destinations);
    TANDEM_CHECK(plan.source_size == t.tensor_parallel(),
                 "weight sync: the controller planned {} learner shards, this learner has tensor_parallel {}",
                 plan.source_size, t.tensor_parallel());
    const int source = t.tensor_rank();
    const bool sends = t.replica() == 0;
    for (auto it = shard_senders.begin(); it != shard_senders.end();) {  // another group's: stale
      it = is_reshard_pair_of(it->first, options.address) ? std::next(it) : shard_senders.erase(it);
    }
    t.with_local_weight_tensors([&](const std::vector<std::pair<std::string, at::Tensor>>& weights) {
      if (!sends) return;
      std::map<std::string, const float*> local;
      for (const auto& [name, w] : weights) {
        TANDEM_CHECK(w.device().is_cpu(), "weight sync: resharding sends host tensors; {} is on {}", name, w.device().str());
        local[name] = w.data_ptr<float>();
      }
      for (int d = 0; d < plan.destination_size; ++d) {
        const ReshardStream stream = pack_reshard_stream(plan, source, d, [&](const ParameterShard& p) {
          const auto found = local.find(p.name);
          return found == local.end() ? nullptr : found->second;
        });
        if (stream.tensors.empty()) continue;
        WeightSyncOptions pair = options;
        pair.address = reshard_segment_name(options.address, source, d);
        auto& sender = shard_senders[pair.address];
        if (!sender) sender = make_weight_sender(pair);
        const PublishStats sent = sender->publish(version, stream.tensors);
        stats.bytes += sent.bytes;
        stats.buckets += sent.buckets;
      }
    });
    return stats;
  }

  // Learner rank 0 serves its group's rendezvous store across hosts: a port free on its
  // own address, which the controller then hands every rank.
  CommandResult free_port(const CommandMsg& command, const std::vector<std::string>&) {
    const Body<wire::FreePortRequest> body(command.body, command.name);
    const int port = free_tcp_port(to_string(body->getHost()));
    return {encode_body<wire::FreePort>([&](wire::FreePort::Builder out) { out.setPort(port); }), {}};
  }

  // A new NCCL weight-sync group: rank 0 makes its id and stays its bootstrap root.
  CommandResult nccl_id(const CommandMsg&, const std::vector<std::string>&) {
    const std::string id = nccl_new_unique_id();
    return {encode_body<wire::NcclId>([&](wire::NcclId::Builder out) { out.setUniqueId(as_data(id)); }), {}};
  }

  CommandResult save_or_load(const CommandMsg& command, const std::vector<std::string>&) {
    const Body<wire::CheckpointRequest> body(command.body, command.name);
    Trainer& t = require_trainer(command.name);
    const std::string dir = to_string(body->getDir());
    if (command.name == "learner_save") t.save_checkpoint(dir, to_string(body->getTokenizerFrom()));
    else t.load_checkpoint(dir);
    const int64_t steps = t.optimizer_steps();
    return {encode_body<wire::CheckpointDone>([&](wire::CheckpointDone::Builder out) { out.setOptimizerSteps(steps); }),
            {}};
  }

  CommandResult snapshot(const CommandMsg& command, const std::vector<std::string>&) {
    const Body<wire::SnapshotRequest> body(command.body, command.name);
    Trainer& t = require_trainer(command.name);
    snapshot_root = to_string(body->getRoot());
    t.save_snapshot(to_string(body->getDir()), to_string(body->getReferenceDir()), body->getStep(),
                    body->getSourceRank());
    return {empty_body<wire::Empty>(), {}};
  }

  // A snapshot that is not here or does not fit is an answer, not an error: the
  // controller then restores the last checkpoint instead.
  CommandResult load_snapshot(const CommandMsg& command, const std::vector<std::string>&) {
    const Body<wire::SnapshotRequest> body(command.body, command.name);
    Trainer& t = require_trainer(command.name);
    snapshot_root = to_string(body->getRoot());
    std::string problem;
    try {
      t.load_snapshot(to_string(body->getDir()), to_string(body->getReferenceDir()), body->getStep(),
                      body->getSourceRank());
    } catch (const std::exception& e) {
      problem = e.what();
    }
    const int64_t steps = t.optimizer_steps();
    return {encode_body<wire::SnapshotLoaded>([&](wire::SnapshotLoaded::Builder out) {
              out.setLoaded(problem.empty());
              out.setProblem(problem);
              out.setOptimizerSteps(steps);
            }),
            {}};
  }

  CommandResult export_policy(const CommandMsg& command, const std::vector<std::string>&) {
    const Body<wire::ExportRequest> body(command.body, command.name);
    Trainer& t = require_trainer(command.name);
    const std::string dtype = to_string(body->getDtype());  // model.dtype
    t.export_policy(to_string(body->getDir()), to_string(body->getTokenizerFrom()),
                    dtype == "bfloat16" ? DType::bf16 : dtype == "float16" ? DType::f16 : DType::f32,
                    to_string(body->getConfigExtra()));
    return {empty_body<wire::Empty>(), {}};
  }
};

using LearnerMethod = CommandResult (LearnerState::*)(const CommandMsg&, const std::vector<std::string>&);

// The learner worker's commands (learner_commands.capnp declares their bodies).
const std::map<std::string, LearnerMethod>& learner_commands() {
  static const std::map<std::string, LearnerMethod> table = {
      {"torch_info", &LearnerState::torch_info},
      {"learner_init", &LearnerState::init},
      {"learner_train", &LearnerState::train},
      {"learner_sft", &LearnerState::sft},
      {"learner_values", &LearnerState::per_token},
      {"learner_logprobs", &LearnerState::per_token},
      {"learner_probe_logprobs", &LearnerState::per_token},
      {"learner_ref_logprobs", &LearnerState::per_token},
      {"learner_preference_step", &LearnerState::preference_step},
      {"learner_reward_scores", &LearnerState::reward_scores},
      {"learner_publish", &LearnerState::publish},
      {"learner_free_port", &LearnerState::free_port},
      {"learner_nccl_id", &LearnerState::nccl_id},
      {"learner_save", &LearnerState::save_or_load},
      {"learner_load", &LearnerState::save_or_load},
      {"learner_export", &LearnerState::export_policy},
      {"learner_snapshot", &LearnerState::snapshot},
      {"learner_load_snapshot", &LearnerState::load_snapshot},
  };
  return table;
}

}  // namespace

CommandHandler learner_command_handler(std::function<void(const Config&)> prepare) {
  auto state = std::make_shared<LearnerState>();
  state->prepare = std::move(prepare);
  return [state](const CommandMsg& command, const std::vector<std::string>& attachments) -> CommandResult {
    const auto found = learner_commands().find(command.name);
    if (found == learner_commands().end()) throw unknown_command("learner", command.name, learner_commands());
    return ((*state).*(found->second))(command, attachments);
  };
}

std::vector<std::string> learner_command_names() {
  std::vector<std::string> names;
  for (const auto& entry : learner_commands()) names.push_back(entry.first);
  return names;
}

}  // namespace tandem
