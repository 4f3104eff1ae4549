#include "learner/learner_role.h"

#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "core/config.h"
#include "core/command_body.h"
#include "core/error.h"
#include "core/net_address.h"
#include "learner/collectives.h"
#include "learner/learner_device.h"
#include "learner/sample_codec.h"
#include "learner/trainer.h"
#include "weight_sync/local.h"
#include "weight_sync/nccl_id.h"
#include "weight_sync/options_json.h"
#include "weight_sync/transport.h"

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include <memory>

namespace tandem {

namespace {

// One rank's state between commands; the executor thread runs commands one at a time.
struct LearnerState {
  std::function<void(const Config&)> prepare;
  std::unique_ptr<Collectives> collectives;
  std::unique_ptr<Trainer> trainer;

  KeptEndpoint<WeightSender> sender{make_weight_sender};

  Trainer& require_trainer(const std::string& command) {
    if (!trainer) throw Error(fmt::format("{}: send learner_init first", command));
    return *trainer;
  }

  CommandResult init(const CommandMsg& command) {
    const nlohmann::json body = command_json(command);
    const Config config = load_config_text(body.at("config").get<std::string>(), "learner_init config").config;
    if (prepare) prepare(config);
    const std::string model_dir = resolve_model_path(body.at("model").get<std::string>());
    ModelConfig model = read_model_config(model_dir + "/config.json");
    // The tokenizer's size when the checkpoint pads its vocabulary (model_config.h).
    if (const int64_t ids = body.value("sampled_vocab_size", int64_t{0}); ids > 0) {
      limit_to_tokenizer(model, ids, model_dir);
    }
    TrainerOptions options;
    options.learner = config.learner;
    options.algorithm = config.algorithm;
    options.temperature = config.rollout.temperature;
    options.max_response_length = config.rollout.max_new_tokens;
    options.total_optimizer_steps = body.value("total_optimizer_steps", int64_t{1});
    CollectivesOptions group;
    group.rendezvous = body.value("rendezvous", std::string());
    group.rank = body.at("rank").get<int>();
    group.world_size = body.at("world_size").get<int>();
    group.host = body.value("host", group.host);  // this rank's address, as the controller saw it register
    // This rank's GPU under learner.device cuda: its index among the learner ranks of its
    // machine (the local launcher puts every rank on one machine: its rank).
    options.local_rank = body.value("local_rank", group.rank);
    if (options.learner.device == "auto") {  // the controller resolves it; a direct caller may not
      options.learner.device = resolve_learner_device("auto", options.local_rank, learner_cuda_support()).type;
    }
    group.device = options.learner.device;  // cuda: NCCL on the trainer's GPU; cpu: Gloo
    group.cuda_device = options.local_rank;
    // One intra-op thread per core this rank owns: libtorch's OpenMP threads wait at
    // barriers for each other, and oversubscribed cores make that 50x slower
    // (bench/RESULTS.md, learner_cpu). The controller says how many are ours.
    if (const int threads = body.value("threads", 0); threads > 0) at::set_num_threads(threads);
    trainer.reset();
    collectives.reset();  // a communicator of an earlier init ends before the next one joins
    collectives = Collectives::create(group);
    trainer = std::make_unique<Trainer>(model, load_model_weights(model_dir, model), options, *collectives);
    return {fmt::format("{{\"intra_op_threads\":{}}}", at::get_num_threads()), {}};
  }

  CommandResult train(const CommandMsg& command, const std::vector<std::string>& attachments) {
    Trainer& t = require_trainer(command.name);
    UpdateMetrics metrics = t.train(decode_training_batch(command.body, attachments));
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [name, value] : metrics.entries()) out[name] = value;
    out["optimizer_steps"] = t.optimizer_steps();
    out["tokens"] = metrics.tokens;
    return {out.dump(), {}};
  }
};

}  // namespace

CommandHandler learner_command_handler(std::function<void(const Config&)> prepare) {
  auto state = std::make_shared<LearnerState>();
  state->prepare = std::move(prepare);
  return [state](const CommandMsg& command, const std::vector<std::string>& attachments) -> CommandResult {
    if (command.name == "torch_info") {
      return {fmt::format("{{\"libtorch\":\"{}\",\"intra_op_threads\":{}}}", TORCH_VERSION, at::get_num_threads()),
              {}};
    }
    if (command.name == "learner_init") return state->init(command);
    if (command.name == "learner_train") return state->train(command, attachments);
    if (command.name == "learner_sft") {
      // One supervised warm-up step: {"lr": x, "batch": <training-batch header, one
      // mini-batch>} with the codec's frames; the samples' per-token fields are ignored.
      Trainer& t = state->require_trainer(command.name);
      const nlohmann::json body = command_json(command);
      const auto batches = decode_training_batch(body.at("batch").dump(), attachments);
      if (batches.size() != 1) throw Error("learner_sft: send exactly one mini-batch of samples");
      const UpdateMetrics metrics = t.supervised_step(batches[0], body.at("lr").get<double>());
      return {nlohmann::json{{"loss", metrics.objective.loss},
                             {"tokens", metrics.tokens},
                             {"grad_norm", metrics.grad_norm}}
                  .dump(),
              {}};
    }
    if (command.name == "learner_values" || command.name == "learner_logprobs" ||
        command.name == "learner_probe_logprobs") {
      // Per response token of this rank's share of the samples (one mini-batch in the
      // training-batch codec; their per-token fields are ignored): the critic's values, or
      // the policy's log-probs (in the training precision; the probe's in float32, as the
      // rollout engine computes them). One float32 frame, every sample's values back to back.
      Trainer& t = state->require_trainer(command.name);
      const auto batches = decode_training_batch(command.body, attachments);
      if (batches.size() != 1) throw Error(fmt::format("{}: send exactly one mini-batch of samples", command.name));
      std::string frame;
      const auto per_token = command.name == "learner_values"
                                 ? t.values(batches[0])
                                 : t.response_logprobs(batches[0], command.name == "learner_probe_logprobs");
      for (const std::vector<float>& v : per_token) {
        frame.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
      }
      return {"{}", {frame}};
    }
    if (command.name == "learner_publish") {
      // The current policy for rollout workers: every rank calls (fsdp gathers), rank 0 writes.
      const nlohmann::json body = command_json(command);
      Trainer& t = state->require_trainer(command.name);
      const int64_t version = body.at("version").get<int64_t>();
      const bool root = state->collectives->rank() == 0;
      if (body.value("local", false)) {
        const ModelWeights weights = t.weights();
        if (root) {
          LocalWeights local;
          local.version = version;
          for (const WeightTensor& w : weights.tensors()) {
            local.tensors.push_back({w.name, w.shape});
            local.data.push_back(w.data);
          }
          put_local_weights(std::move(local));
        }
      }
      if (!body.contains("transport")) return {"{}", {}};
      // Sent from where the parameters live: host memory on the CPU, device memory on a GPU
      // (the cuda_ipc and nccl transports copy device to device; no host copy of the weights).
      PublishStats stats;
      t.with_weight_tensors([&](const std::vector<std::pair<std::string, at::Tensor>>& weights) {
        if (!root) return;
        std::vector<OutgoingTensor> tensors;
        for (const auto& [name, w] : weights) tensors.push_back({name, w.sizes().vec(), w.data_ptr()});
        const WeightSyncOptions options = weight_sync_options_from_json(body.at("transport"), command.name);
        stats = state->sender.for_options(options).publish(version, tensors);
      });
      return {fmt::format("{{\"bytes\":{},\"buckets\":{}}}", stats.bytes, stats.buckets), {}};
    }
    if (command.name == "learner_free_port") {
      // Learner rank 0 serves its group's rendezvous store across hosts: a port free on its
      // own address, which the controller then hands every rank.
      const nlohmann::json body = command_json(command);
      return {nlohmann::json{{"port", free_tcp_port(body.at("host").get<std::string>())}}.dump(), {}};
    }
    if (command.name == "learner_nccl_id") {
      // A new NCCL weight-sync group: rank 0 makes its id and stays its bootstrap root.
      return {nlohmann::json{{"nccl_unique_id", nccl_unique_id_to_hex(nccl_new_unique_id())}}.dump(), {}};
    }
    if (command.name == "learner_save" || command.name == "learner_load") {
      const nlohmann::json body = command_json(command);
      const std::string dir = body.at("dir").get<std::string>();
      Trainer& t = state->require_trainer(command.name);
      if (command.name == "learner_save") t.save_checkpoint(dir, body.value("tokenizer_from", std::string()));
      else t.load_checkpoint(dir);
      return {fmt::format("{{\"optimizer_steps\":{}}}", t.optimizer_steps()), {}};
    }
    if (command.name == "learner_export") {
      const nlohmann::json body = command_json(command);
      Trainer& t = state->require_trainer(command.name);
      const std::string dtype = body.value("dtype", std::string("float32"));  // model.dtype
      t.export_policy(body.at("dir").get<std::string>(), body.at("tokenizer_from").get<std::string>(),
                      dtype == "bfloat16" ? DType::bf16 : dtype == "float16" ? DType::f16 : DType::f32);
      return {"{}", {}};
    }
    throw Error(fmt::format("learner worker: unknown command \"{}\" (known: ping, describe, torch_info, learner_init, "
                            "learner_train, learner_sft, learner_values, learner_logprobs, learner_probe_logprobs, learner_publish, learner_free_port, learner_nccl_id, learner_save, learner_load, learner_export)",
                            command.name));
  };
}

}  // namespace tandem
