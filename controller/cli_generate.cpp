// `tandem generate --model DIR --prompt "..." [--n 4 --temperature 0.7 --device cuda ...]`:
// sample completions with the rollout engine (CPU or CUDA backend), for users trying a
// model, and for scripts comparing backends (--json prints token ids and log-probs).
#include "actor/model_weights.h"
#include "actor/presets.h"
#include "actor/tokenizer.h"
#include "controller/cli.h"
#include "core/error.h"
#include "kernels/device_probe.h"
#include "rollout/engine.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>

namespace tandem {

int cli_generate(const GenerateArgs& args) {
  const std::string dir = resolve_model_path(args.model);
  ModelConfig config = read_model_config(dir + "/config.json");
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir);
  limit_to_tokenizer(config, tokenizer->vocab_size(), dir);  // padded ids are never drawn
  const Tokenizer& tok = *tokenizer;
  RolloutConfig rollout;
  rollout.kv_cache_mb = args.kv_cache_mb;
  rollout.threads = args.threads;
  rollout.dtype = args.dtype;
  EngineOptions options = engine_options(rollout);
  options.device = resolve_device(args.device, "--device");  // cuda without a usable GPU: a usage error
  RolloutEngine engine(config, load_model_weights(dir, config), options,
                       [&tok](const std::vector<int32_t>& ids) { return tok.decode(ids); });

  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < args.prompts.size(); ++i) {
    GenerationRequest r;
    r.id = i;
    r.prompt = tok.encode(args.prompts[i]);
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
    const std::string text = tok.decode(s.tokens);
    if (args.json) {
      nlohmann::json line = {{"prompt", s.request_id}, {"sample", s.sample_index}, {"text", text},
                             {"token_ids", s.tokens}, {"logprobs", s.logprobs},
                             {"finish_reason", finish_reason_name(s.finish_reason)},
                             {"weight_version", s.weight_version}};
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("--- prompt %llu, sample %lld (%zu tokens, %s)\n%s%s\n", static_cast<unsigned long long>(s.request_id) + 1,
                  static_cast<long long>(s.sample_index) + 1, s.tokens.size(), finish_reason_name(s.finish_reason),
                  args.prompts[s.request_id].c_str(), text.c_str());
    }
  }
  std::fprintf(stderr, "generated %lld tokens in %.2f s (%.0f tokens/s, %lld engine steps, %lld preemptions, %s)\n",
               static_cast<long long>(generated), seconds, generated / std::max(seconds, 1e-9),
               static_cast<long long>(engine.stats().steps), static_cast<long long>(engine.stats().preemptions),
               engine.backend_name().c_str());
  return 0;
}

}  // namespace tandem
