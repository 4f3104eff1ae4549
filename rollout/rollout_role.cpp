#include "rollout/rollout_role.h"

#include "actor/lora.h"
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "core/config.h"
#include "core/command_codec.h"
#include "core/error.h"
#include "core/worker_commands.capnp.h"
#include "core/worker_runtime.h"
#include "kernels/device_probe.h"
#include "rollout/engine.h"
#include "rollout/rollout_commands.capnp.h"
#include "rollout/kv_cache.h"
#include "rollout/rollout_multi_turn.h"
#include "weight_sync/local.h"
#include "weight_sync/options_wire.h"
#include "weight_sync/reshard.h"
#include "weight_sync/transport.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <thread>

namespace tandem {

namespace {

// Tests only: a pause after every engine step, so that a rollout outlasts training and a
// weight update lands part-way (partial rollouts) whatever the machine's speed.
std::chrono::milliseconds test_step_delay() {
  const char* value = std::getenv("TANDEM_TEST_ROLLOUT_STEP_DELAY_MS");
  return std::chrono::milliseconds(value && *value ? std::strtol(value, nullptr, 10) : 0);
}

struct RolloutState {
  std::unique_ptr<RolloutEngine> engine;
  const std::chrono::milliseconds step_delay = test_step_delay();
  KeptEndpoint<WeightReceiver> receiver{make_weight_receiver};
  std::map<std::string, std::unique_ptr<WeightReceiver>> shard_receivers;  // resharding: per segment, kept
  RolloutConfig rollout;
  LoraSpec lora;  // rank 0: no adapters; else the sync brings adapters only
  std::unique_ptr<RolloutMultiTurn> multi_turn;  // the config lists tools or an environment
  std::function<void(const Config&)> prepare;     // rollout_command_handler's

  RolloutEngine& require_engine(const std::string& command) {
    if (!engine) throw Error(fmt::format("{}: send rollout_init first", command));
    return *engine;
  }

  CommandResult init(const CommandMsg& command, const std::vector<std::string>&) {
    const Body<wire::RolloutInit> body(command.body, command.name);
    const Config config = load_config_text(to_string(body->getConfig()), "rollout_init config").config;
    if (prepare) prepare(config);
    const std::string model_dir = resolve_model_path(to_string(body->getModel()));
    ModelConfig model = read_model_config(model_dir + "/config.json");
    // The tokenizer's size when the checkpoint pads its vocabulary (model_config.h).
    if (const int64_t ids = body->getSampledVocabSize(); ids > 0) limit_to_tokenizer(model, ids, model_dir);
    rollout = config.rollout;
    engine.reset();
    EngineOptions options = engine_options(rollout);
    options.device = resolve_device(rollout.device, "rollout.device");  // "auto" -> cpu | cuda
    if (config.multi_turn() && config.rollout.multi_turn.kv_pin_mb > 0) {
      const KvCacheShape shape{model.num_hidden_layers, model.num_key_value_heads, model.head_dim, options.block_size, 0};
      options.max_pinned_blocks = (config.rollout.multi_turn.kv_pin_mb << 20) / shape.bytes_per_block();
    }
    ModelWeights weights = load_model_weights(model_dir, model);
    lora = {};
    if (config.learner.lora.enabled()) {
      // LoRA: the engine keeps the base and takes only adapters from the learners.
      const LoraConfig& l = config.learner.lora;
      lora = {l.rank, l.alpha, lora_modules(l.target_modules), l.dropout, static_cast<uint64_t>(config.experiment.seed),
              l.base_dtype == "bf16"};
      if (lora.base_bf16) round_projections_to_bf16(weights);  // the base the learners compute with
      engine = std::make_unique<RolloutEngine>(model, weights, options);
      engine->add_adapters(lora, weights);
    } else {
      engine = std::make_unique<RolloutEngine>(model, std::move(weights), options);
    }
    multi_turn.reset();
    if (config.multi_turn()) {
      const std::vector<int32_t> eos(model.eos_token_ids.begin(), model.eos_token_ids.end());
      multi_turn = std::make_unique<RolloutMultiTurn>(config, model_dir, to_string(body->getTurnFrames()),
                                                      to_string(body->getEnvironmentTemplate()), eos);
    }
    return {empty_body<wire::Empty>(), {}};
  }

  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kStreamInterval{50};

  // Samples as rollout_generate's reply and progress carry them: a RolloutSamples body
  // (per sample: request id, index, length, finish reason, weight versions) and two
  // frames of the samples' tokens (int32) and log-probs (float32), concatenated.
  // Version runs: one per version that drew tokens, so a sample continued on newer
  // weights (a partial rollout) says which drew each token.
  struct SampleFrames {
    std::string tokens, logprobs;
  };
  // `records`: multi-turn, each sample's trajectory record (JSON), in order; else empty.
  static SampleFrames write_samples(wire::RolloutSamples::Builder out, const std::vector<GeneratedSample>& samples,
                                    const std::vector<std::string>& records = {}) {
    SampleFrames frames;
    auto list = out.initSamples(static_cast<unsigned>(samples.size()));
    for (size_t i = 0; i < samples.size(); ++i) {
      const GeneratedSample& s = samples[i];
      auto sample = list[static_cast<unsigned>(i)];
      sample.setRequestId(s.request_id);
      sample.setSampleIndex(s.sample_index);
      sample.setLength(static_cast<uint32_t>(s.tokens.size()));
      sample.setFinishReason(finish_reason_name(s.finish_reason));
      sample.setWeightVersion(s.weight_version);
      std::vector<std::pair<uint32_t, int64_t>> runs;
      for (size_t t = 0; t < s.token_versions.size(); ++t) {
        if (t == 0 || s.token_versions[t] != s.token_versions[t - 1]) runs.push_back({static_cast<uint32_t>(t), s.token_versions[t]});
      }
      auto run_list = sample.initVersionRuns(static_cast<unsigned>(runs.size()));
      for (size_t r = 0; r < runs.size(); ++r) {
        run_list[static_cast<unsigned>(r)].setFirstToken(runs[r].first);
        run_list[static_cast<unsigned>(r)].setVersion(runs[r].second);
      }
      if (!records.empty()) sample.setMultiTurn(records[i]);
      frames.tokens.append(reinterpret_cast<const char*>(s.tokens.data()), s.tokens.size() * 4);
      frames.logprobs.append(reinterpret_cast<const char*>(s.logprobs.data()), s.logprobs.size() * 4);
    }
    return frames;
  }

  // A trajectory as the sample rollout_generate returns: every token after the prompt,
  // its record going alongside.
  static GeneratedSample trajectory_sample(const Trajectory& t) {
    GeneratedSample s;
    s.request_id = t.request_id;
    s.sample_index = t.sample_index;
    s.tokens = t.tokens;
    s.logprobs = t.logprobs;
    s.token_versions = t.token_versions;
    s.weight_version = t.token_versions.empty() ? 0 : t.token_versions.front();
    const bool cut = t.stop == StopReason::length || t.stop == StopReason::max_total_tokens;
    s.finish_reason = cut ? FinishReason::finish_reason_length : FinishReason::finish_reason_stop;
    return s;
  }

  CommandResult generate(const CommandMsg& command, const std::vector<std::string>& attachments) {
    RolloutEngine& e = require_engine(command.name);
    const Body<wire::RolloutGenerate> body(command.body, command.name);
    if (attachments.size() != 1) throw Error("rollout_generate: expected 1 frame of prompt tokens");
    const std::string& tokens = attachments[0];
    std::vector<GenerationRequest> requests;
    std::vector<std::string> environment_rows;  // with an environment: each request's row
    size_t offset = 0;
    for (const auto r : body->getRequests()) {
      GenerationRequest request;
      request.id = r.getId();
      const size_t length = r.getPromptLength();
      if ((offset + length) * 4 > tokens.size()) {
        throw Error(fmt::format("rollout_generate: request {} runs past the token frame", request.id));
      }
      request.prompt.resize(length);
      std::memcpy(request.prompt.data(), tokens.data() + offset * 4, length * 4);
      offset += length;
      request.n = r.getN();
      request.seed = r.getSeed();
      request.max_new_tokens = rollout.max_new_tokens;
      // A request may bring its own temperature (evaluation: eval.temperature, 0 greedy).
      const bool own = r.getOwnTemperature();
      request.sampling.temperature = own ? r.getTemperature() : rollout.temperature;
      request.sampling.top_p = own ? 1.0 : rollout.top_p;
      request.sampling.top_k = own ? 0 : rollout.top_k;
      if (r.hasEnvironmentRow()) environment_rows.push_back(to_string(r.getEnvironmentRow()));
      requests.push_back(std::move(request));
    }
    if (offset * 4 != tokens.size()) throw Error("rollout_generate: bytes left over after the last prompt");
    // stream: the samples that finished go to the controller every kStreamInterval as
    // progress, so it scores them while the rest generate; the reply still has them all.
    const bool stream = body->getStream();
    // interruptible (algorithm.async.partial_rollouts): a rollout_load_weights that
    // arrives meanwhile runs between engine steps, and the samples in flight go on with
    // the new weights.
    const bool interruptible = body->getInterruptible();
    std::vector<GeneratedSample> unsent;
    Clock::time_point last_sent = Clock::now();
    auto after_step = [&](const std::vector<GeneratedSample>& finished) {
      if (stream) {
        unsent.insert(unsent.end(), finished.begin(), finished.end());
        if (!unsent.empty() && Clock::now() - last_sent >= kStreamInterval) {
          SampleFrames frames;
          const std::string progress = encode_body<wire::RolloutSamples>(
              [&](wire::RolloutSamples::Builder out) { frames = write_samples(out, unsent); });
          send_command_progress(progress, {frames.tokens, frames.logprobs});
          unsent.clear();
          last_sent = Clock::now();
        }
      }
      if (step_delay.count() > 0) std::this_thread::sleep_for(step_delay);
      if (interruptible) {
        serve_interleaved_commands([](const std::string& name) { return name == "rollout_load_weights"; });
      }
    };
    const EngineStats before = e.stats();
    std::vector<GeneratedSample> samples;
    std::vector<std::string> records;
    MultiTurnStats turns;
    if (multi_turn) {
      // Trajectories go back when all are done: scoring during generation is single-turn only.
      for (const Trajectory& t : multi_turn->generate(e, requests, environment_rows, [&] { after_step({}); }, &turns)) {
        samples.push_back(trajectory_sample(t));
        records.push_back(trajectory_record(t).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      }
    } else {
      samples = e.generate(requests, after_step);
    }
    const EngineStats& after = e.stats();
    SampleFrames frames;
    std::string reply = encode_body<wire::RolloutSamples>([&](wire::RolloutSamples::Builder out) {
      frames = write_samples(out, samples, records);
      auto stats = out.initStats();
      stats.setDecodeTokens(after.decode_tokens - before.decode_tokens);
      stats.setPrefillTokens(after.prefill_tokens - before.prefill_tokens);
      stats.setPrefillTokensSaved(after.prefill_tokens_saved - before.prefill_tokens_saved);
      stats.setPreemptions(after.preemptions - before.preemptions);
      stats.setSessionTokensReused(turns.session_tokens_reused);
      stats.setEvictedSessions(turns.evicted_sessions);
      stats.setKvPinnedBlocksMax(turns.kv_pinned_blocks_max);
    });
    return {std::move(reply), {frames.tokens, frames.logprobs}};
  }

  CommandResult load_weights(const CommandMsg& command, const std::vector<std::string>&) {
    RolloutEngine& e = require_engine(command.name);
    const Body<wire::RolloutLoadWeights> body(command.body, command.name);
    std::vector<ExpectedTensor> expected;
    if (lora.rank > 0) {  // the adapters, canonical; the base never changes
      for (const ParameterShard& s : lora_adapter_layout(e.config(), lora, {})) expected.push_back({s.name, s.canonical_shape});
    } else {
      for (const WeightSpec& spec : expected_weights(e.config())) expected.push_back({spec.name, spec.shape});
    }
    std::vector<WeightTensor> tensors;
    int64_t version = 0;
    if (body->isLocal()) {
      LocalWeights local = take_local_weights();
      for (size_t i = 0; i < local.tensors.size(); ++i) {
        tensors.push_back({local.tensors[i].name, local.tensors[i].shape, std::move(local.data[i])});
      }
      version = local.version;
    } else if (const WeightSyncOptions options = read_weight_sync_transport(body->getTransport(), command.name);
               options.reshard_sources > 0) {
      // Each engine rank's shard straight from the learner ranks' slices (weight_sync/reshard.h).
      TANDEM_CHECK(options.reshard_destinations == e.tensor_parallel(),
                   "rollout_load_weights: the controller planned {} engine shards, this engine has tensor_parallel {}",
                   options.reshard_destinations, e.tensor_parallel());
      const ReshardPlan& plan = cached_reshard_plan(e.config(), options.reshard_sources, options.reshard_destinations);
      for (auto it = shard_receivers.begin(); it != shard_receivers.end();) {  // another group's: stale
        it = is_reshard_pair_of(it->first, options.address) ? std::next(it) : shard_receivers.erase(it);
      }
      std::vector<ModelWeights> shards;
      // The version is the first stream's (-1: not seen yet); receive_reshard holds every other to it.
      int64_t seen = -1;
      for (int d = 0; d < plan.destination_size; ++d) {
        shards.push_back(receive_reshard(plan, d, seen, [&](int source, const std::vector<ExpectedTensor>& want,
                                                               const WeightSink& sink) {
          WeightSyncOptions pair = options;
          pair.address = reshard_segment_name(options.address, source, d);
          auto& kept = shard_receivers[pair.address];
          if (!kept) kept = make_weight_receiver(pair);
          return seen = kept->receive(want, sink);
        }));
      }
      version = seen;
      e.update_weight_shards(shards, version, body->getRewind());
      return {encode_body<wire::RolloutWeightsLoaded>([&](wire::RolloutWeightsLoaded::Builder out) { out.setVersion(version); }),
              {}};
    } else {
      version = receiver.for_options(options).receive(expected, [&](const ExpectedTensor& t, const void* data) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        const float* values = static_cast<const float*>(data);  // expected dtypes are float32
        tensors.push_back({t.name, t.shape, std::vector<float>(values, values + n)});
      });
    }
    // Checks names and shapes first.
    e.update_weights(ModelWeights(std::move(tensors)), version, body->getRewind());
    return {encode_body<wire::RolloutWeightsLoaded>([&](wire::RolloutWeightsLoaded::Builder out) { out.setVersion(version); }),
            {}};
  }
};

using RolloutMethod = CommandResult (RolloutState::*)(const CommandMsg&, const std::vector<std::string>&);

// The rollout worker's commands (rollout_commands.capnp declares their bodies).
const std::map<std::string, RolloutMethod>& rollout_commands() {
  static const std::map<std::string, RolloutMethod> table = {
      {"rollout_init", &RolloutState::init},
      {"rollout_generate", &RolloutState::generate},
      {"rollout_load_weights", &RolloutState::load_weights},
  };
  return table;
}

}  // namespace

CommandHandler rollout_command_handler(std::function<void(const Config&)> prepare) {
  auto state = std::make_shared<RolloutState>();
  state->prepare = std::move(prepare);
  return [state](const CommandMsg& command, const std::vector<std::string>& attachments) -> CommandResult {
    const auto found = rollout_commands().find(command.name);
    if (found == rollout_commands().end()) throw unknown_command("rollout", command.name, rollout_commands());
    return ((*state).*(found->second))(command, attachments);
  };
}

std::vector<std::string> rollout_command_names() {
  std::vector<std::string> names;
  for (const auto& entry : rollout_commands()) names.push_back(entry.first);
  return names;
}

}  // namespace tandem
