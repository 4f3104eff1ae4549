// `tandem generate --model DIR --prompt "..." [--n 4 --temperature 0.7 --device cuda ...]`:
// sample completions with the rollout engine (CPU or CUDA backend), for users trying a
// model, and for scripts comparing backends (--json prints token ids and log-probs).
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "actor/tokenizer.h"
#include "controller/cli/cli.h"
#include "controller/cli/model.h"
#include "core/error.h"
#include "kernels/device_probe.h"
#include "rollout/engine.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace tandem {

int cli_generate(const GenerateArgs& args) {
  CliModel model = load_cli_model(args.model);
  if (args.prompts.empty() && args.prompt_ids.empty()) throw UsageError("generate: give --prompt or --prompt-ids");
  if (!model.tokenizer && !args.prompts.empty()) {
    throw UsageError(fmt::format("--prompt: {} has no tokenizer (a llama2.c checkpoint, a directory without tokenizer.json, or a GGUF file without a vocabulary); give --prompt-ids", model.source));
  }
  const ModelConfig& config = model.config;
  const Tokenizer* tok = model.tokenizer.get();
  // Text where there is a tokenizer, else the ids ("[1, 2, 3]").
  auto text_of = [tok](const std::vector<int32_t>& ids) { return tok ? tok->decode(ids) : nlohmann::json(ids).dump(); };
  // A response as printed: without its end-of-sequence token (the finish reason says "stop").
  auto response_text = [&](const std::vector<int32_t>& ids) {
    std::vector<int32_t> shown = ids;
    if (!shown.empty() && std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), shown.back()) !=
                              config.eos_token_ids.end()) {
      shown.pop_back();
    }
    return text_of(shown);
  };
  RolloutConfig rollout;
  rollout.kv_cache_mb = args.kv_cache_mb;
  rollout.threads = args.threads;
  rollout.dtype = args.dtype;
  EngineOptions options = engine_options(rollout);
  options.device = resolve_device(args.device, "--device");  // cuda without a usable GPU: a usage error
  if (!tok && !args.stop.empty()) throw UsageError("--stop: stop strings need a tokenizer; this model has none");
  RolloutEngine engine(config, std::move(model.weights), options, text_of);

  std::vector<GenerationRequest> requests;
  std::vector<std::string> prompt_texts;  // as printed
  const size_t prompts = args.prompts.empty() ? args.prompt_ids.size() : args.prompts.size();
  for (size_t i = 0; i < prompts; ++i) {
    GenerationRequest r;
    r.id = i;
    if (args.prompts.empty()) {
      r.prompt = parse_id_list(args.prompt_ids[i], config.vocab_size, "--prompt-ids");
      prompt_texts.push_back(text_of(r.prompt));
    } else {
      r.prompt = tok->encode(args.prompts[i]);
      prompt_texts.push_back(args.prompts[i]);
    }
    if (r.prompt.empty()) throw UsageError(fmt::format("--prompt {} is empty", i + 1));
    r.n = args.n;
    r.max_new_tokens = args.max_new_tokens;
    r.sampling = {args.temperature, args.top_k, args.top_p};
    r.stop_strings = args.stop;
    r.seed = static_cast<uint64_t>(args.seed) + i;
    requests.push_back(std::move(r));
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<GeneratedSample> samples = engine.generate(requests);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  int64_t generated = 0;
  for (const GeneratedSample& s : samples) {
    generated += static_cast<int64_t>(s.tokens.size());
    const std::string text = response_text(s.tokens);
    if (args.json) {
      nlohmann::json line = {{"prompt", s.request_id}, {"sample", s.sample_index}, {"text", text},
                             {"token_ids", s.tokens}, {"logprobs", s.logprobs},
                             {"finish_reason", finish_reason_name(s.finish_reason)},
                             {"weight_version", s.weight_version}};
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      // The prompt, then the response; a newline after the response whatever it ends with.
      std::printf("--- prompt %llu, sample %lld (%zu tokens, %s)\n%s%s\n", static_cast<unsigned long long>(s.request_id) + 1,
                  static_cast<long long>(s.sample_index) + 1, s.tokens.size(), finish_reason_name(s.finish_reason),
                  prompt_texts[s.request_id].c_str(), text.c_str());
    }
  }
  const EngineStats& stats = engine.stats();
  std::fprintf(stderr,
               "generated %lld tokens in %.2f s (%.0f tokens/s, %lld engine steps, %lld preemptions, %lld prompt "
               "tokens prefilled, %lld shared, %s)\n",
               static_cast<long long>(generated), seconds, generated / std::max(seconds, 1e-9),
               static_cast<long long>(stats.steps), static_cast<long long>(stats.preemptions),
               static_cast<long long>(stats.prefill_tokens), static_cast<long long>(stats.prefill_tokens_saved),
               engine.backend_name().c_str());
  return 0;
}

}  // namespace tandem
