#include "rollout/rollout_role.h"

#include "actor/model_weights.h"
#include "actor/presets.h"
#include "core/config.h"
#include "core/command_body.h"
#include "core/error.h"
#include "core/worker_runtime.h"
#include "kernels/device_probe.h"
#include "rollout/engine.h"
#include "weight_sync/local.h"
#include "weight_sync/options_json.h"
#include "weight_sync/transport.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
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
  RolloutConfig rollout;

  RolloutEngine& require_engine(const std::string& command) {
    if (!engine) throw Error(fmt::format("{}: send rollout_init first", command));
    return *engine;
  }

  CommandResult init(const CommandMsg& command) {
    const nlohmann::json body = command_json(command);
    const Config config = load_config_text(body.at("config").get<std::string>(), "rollout_init config").config;
    const std::string model_dir = resolve_model_path(body.at("model").get<std::string>());
    ModelConfig model = read_model_config(model_dir + "/config.json");
    // The tokenizer's size when the checkpoint pads its vocabulary (model_config.h).
    if (const int64_t ids = body.value("sampled_vocab_size", int64_t{0}); ids > 0) {
      limit_to_tokenizer(model, ids, model_dir);
    }
    rollout = config.rollout;
    engine.reset();
    EngineOptions options = engine_options(rollout);
    options.device = resolve_device(rollout.device, "rollout.device");  // "auto" -> cpu | cuda
    engine = std::make_unique<RolloutEngine>(model, load_model_weights(model_dir, model), options);
    return {"{}", {}};
  }

  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kStreamInterval{50};

  // Samples as rollout_generate's reply and progress carry them: one JSON row per sample
  // [request id, sample index, length, finish reason, weight version, version runs], and
  // two frames of the samples' tokens (int32) and log-probs (float32), concatenated.
  // Version runs: [[first token, version], ...], one per version that drew tokens, so a
  // sample continued on newer weights (a partial rollout) says which drew each token.
  struct SampleFrames {
    nlohmann::json index = nlohmann::json::array();
    std::string tokens, logprobs;
  };
  static SampleFrames encode_samples(const std::vector<GeneratedSample>& samples) {
    SampleFrames frames;
    for (const GeneratedSample& s : samples) {
      nlohmann::json runs = nlohmann::json::array();
      for (size_t t = 0; t < s.token_versions.size(); ++t) {
        if (t == 0 || s.token_versions[t] != s.token_versions[t - 1]) runs.push_back({t, s.token_versions[t]});
      }
      frames.index.push_back({s.request_id, s.sample_index, s.tokens.size(), finish_reason_name(s.finish_reason),
                              s.weight_version, std::move(runs)});
      frames.tokens.append(reinterpret_cast<const char*>(s.tokens.data()), s.tokens.size() * 4);
      frames.logprobs.append(reinterpret_cast<const char*>(s.logprobs.data()), s.logprobs.size() * 4);
    }
    return frames;
  }

  CommandResult generate(const CommandMsg& command, const std::vector<std::string>& attachments) {
    RolloutEngine& e = require_engine(command.name);
    const nlohmann::json body = command_json(command);
    if (attachments.size() != 1) throw Error("rollout_generate: expected 1 frame of prompt tokens");
    const std::string& tokens = attachments[0];
    std::vector<GenerationRequest> requests;
    size_t offset = 0;
    for (const auto& r : body.at("requests")) {
      GenerationRequest request;
      request.id = r.at("id").get<uint64_t>();
      const size_t length = r.at("prompt_length").get<size_t>();
      if ((offset + length) * 4 > tokens.size()) {
        throw Error(fmt::format("rollout_generate: request {} runs past the token frame", request.id));
      }
      request.prompt.resize(length);
      std::memcpy(request.prompt.data(), tokens.data() + offset * 4, length * 4);
      offset += length;
      request.n = r.at("n").get<int64_t>();
      request.seed = r.at("seed").get<uint64_t>();
      request.max_new_tokens = rollout.max_new_tokens;
      // A request may bring its own temperature (evaluation: eval.temperature, 0 greedy).
      request.sampling.temperature = r.value("temperature", rollout.temperature);
      request.sampling.top_p = r.contains("temperature") ? 1.0 : rollout.top_p;
      request.sampling.top_k = r.contains("temperature") ? 0 : rollout.top_k;
      requests.push_back(std::move(request));
    }
    if (offset * 4 != tokens.size()) throw Error("rollout_generate: bytes left over after the last prompt");
    // "stream": the samples that finished go to the controller every kStreamInterval as
    // progress, so it scores them while the rest generate; the reply still has them all.
    const bool stream = body.value("stream", false);
    // "interruptible" (algorithm.async.partial_rollouts): a rollout_load_weights that
    // arrives meanwhile runs between engine steps, and the samples in flight go on with
    // the new weights.
    const bool interruptible = body.value("interruptible", false);
    std::vector<GeneratedSample> unsent;
    Clock::time_point last_sent = Clock::now();
    auto after_step = [&](const std::vector<GeneratedSample>& finished) {
      if (stream) {
        unsent.insert(unsent.end(), finished.begin(), finished.end());
        if (!unsent.empty() && Clock::now() - last_sent >= kStreamInterval) {
          SampleFrames frames = encode_samples(unsent);
          send_command_progress(nlohmann::json{{"samples", frames.index}}.dump(), {frames.tokens, frames.logprobs});
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
    const std::vector<GeneratedSample> samples = e.generate(requests, after_step);
    SampleFrames frames = encode_samples(samples);
    const EngineStats& after = e.stats();
    nlohmann::json reply = {{"samples", frames.index},
                            {"stats",
                             {{"decode_tokens", after.decode_tokens - before.decode_tokens},
                              {"prefill_tokens", after.prefill_tokens - before.prefill_tokens},
                              {"prefill_tokens_saved", after.prefill_tokens_saved - before.prefill_tokens_saved},
                              {"preemptions", after.preemptions - before.preemptions}}}};
    return {reply.dump(), {frames.tokens, frames.logprobs}};
  }

  CommandResult load_weights(const CommandMsg& command) {
    RolloutEngine& e = require_engine(command.name);
    const nlohmann::json body = command_json(command);
    std::vector<ExpectedTensor> expected;
    for (const WeightSpec& spec : expected_weights(e.config())) expected.push_back({spec.name, spec.shape});
    std::vector<WeightTensor> tensors;
    int64_t version = 0;
    if (body.value("local", false)) {
      LocalWeights local = take_local_weights();
      for (size_t i = 0; i < local.tensors.size(); ++i) {
        tensors.push_back({local.tensors[i].name, local.tensors[i].shape, std::move(local.data[i])});
      }
      version = local.version;
    } else {
      const WeightSyncOptions options = weight_sync_options_from_json(body.at("transport"), command.name);
      version = receiver.for_options(options).receive(expected, [&](const ExpectedTensor& t, const void* data) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        const float* values = static_cast<const float*>(data);  // expected dtypes are float32
        tensors.push_back({t.name, t.shape, std::vector<float>(values, values + n)});
      });
    }
    // Checks names and shapes first.
    e.update_weights(ModelWeights(std::move(tensors)), version, body.value("rewind", false));
    return {fmt::format("{{\"version\":{}}}", version), {}};
  }
};

}  // namespace

CommandHandler rollout_command_handler() {
  auto state = std::make_shared<RolloutState>();
  return [state](const CommandMsg& command, const std::vector<std::string>& attachments) -> CommandResult {
    if (command.name == "rollout_init") return state->init(command);
    if (command.name == "rollout_generate") return state->generate(command, attachments);
    if (command.name == "rollout_load_weights") return state->load_weights(command);
    throw Error(fmt::format("rollout worker: unknown command \"{}\" (known: ping, describe, rollout_init, "
                            "rollout_generate, rollout_load_weights)",
                            command.name));
  };
}

}  // namespace tandem
