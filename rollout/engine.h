// The rollout engine: continuous batching over a paged KV cache, on a CPU or CUDA backend.
//
// Callers add requests at any time and call step(); each step plans (scheduler: which
// sequences prefill or decode, KV blocks, preemption), runs one forward over all of the
// step's tokens on the backend (rollout/model_backend.h), samples on the host, and
// returns the samples that finished. generate() is the run-to-completion convenience.
// Not thread-safe: one thread drives an engine.
#pragma once

#include "actor/lora.h"
#include "actor/model_config.h"
#include "actor/model_weights.h"
#include "core/config.h"
#include "rollout/request.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct EngineOptions {
  int64_t kv_cache_bytes = int64_t{256} << 20;  // rollout.kv_cache_mb
  int64_t block_size = 16;                      // token slots per KV block
  int64_t max_batch_tokens = 2048;              // tokens per step (prefill chunks + decodes)
  int64_t max_running = 256;                    // sequences decoding at once
  int threads = 0;                              // CPU threads, the caller's included; 0: all cores
  // The model backend: "cpu" | "cuda" (rollout.device; the caller resolves "auto").
  std::string device = "cpu";
  // cuda only: storage of weights, activations and the KV cache, "bf16" | "fp32" (rollout.dtype).
  std::string dtype = "bf16";
  // cpu only: "fp32" | "bf16", the weights the products read (rollout.cpu_weights;
  // rollout/cpu_model.h): bf16 halves the bytes decode streams per token.
  std::string cpu_weights = "fp32";
  // cuda only: the KV cache gets this fraction of the GPU memory free once weights and
  // workspace are allocated, in (0, 1) (rollout.gpu_memory_fraction); kv_cache_bytes is
  // ignored on cuda.
  double gpu_memory_fraction = 0.85;
  int cuda_device = 0;  // cuda only: the device ordinal
  // cuda only: at most this many KV blocks; 0: no cap beyond what max_running sequences of
  // max_position_embeddings tokens can use. Tests set it to force preemption.
  int64_t max_kv_blocks = 0;
  // Samples with the same prompt (a request's n, or identical prompts) prefill it once and
  // share its KV blocks, copy-on-write (rollout.prefix_sharing; rollout/scheduler.h).
  // Results are bit-identical either way; off only to measure what it saves.
  bool prefix_sharing = true;
  // Multi-turn sessions waiting for a tool or environment keep their KV blocks up to this
  // many in all, the longest-waiting evicted first (and recomputed when resumed); any
  // step short of blocks evicts them before preempting a running sample. -1: no cap but
  // the cache; 0: nothing is kept (each turn re-prefills its whole prefix).
  int64_t max_pinned_blocks = -1;
  // Ranks the model is split over (rollout.tensor_parallel; rollout/cpu_model.h). The CPU
  // backend only: the CUDA backend refuses more than 1.
  int tensor_parallel = 1;
};

// The engine options a rollout config asks for (rollout.kv_cache_mb, rollout.device, ...).
EngineOptions engine_options(const RolloutConfig& rollout);

struct EngineStats {
  int64_t steps = 0;
  int64_t prefill_tokens = 0;  // tokens run to fill the cache (prompts, recomputation after preemption)
  int64_t prefill_tokens_saved = 0;  // prompt tokens not run: another sample of the same prompt prefilled them
  int64_t decode_tokens = 0;   // tokens sampled
  int64_t preemptions = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_peak = 0;  // most blocks in use at once
  int64_t kv_blocks_used = 0;  // blocks in use after the latest step (0 once all samples are done)
  double forward_seconds = 0;  // wall time in the backend's forward, logits on the host included
  double sample_seconds = 0;   // wall time sampling and checking stops on the host
  // Sessions (multi-turn)
  int64_t session_tokens_reused = 0;  // a continued turn's prefix found in its kept blocks, not prefilled again
  int64_t sessions_evicted = 0;       // waiting sessions whose blocks were taken back (recomputed later)
  int64_t kv_blocks_pinned = 0;       // held by waiting sessions after the latest step or call
  int64_t kv_blocks_pinned_peak = 0;
};

// Text of a completion, for stop strings.
using Detokenizer = std::function<std::string(const std::vector<int32_t>&)>;

class RolloutEngine {
 public:
  RolloutEngine(const ModelConfig& config, ModelWeights weights, const EngineOptions& options,
                Detokenizer detokenize = {});
  ~RolloutEngine();
  RolloutEngine(const RolloutEngine&) = delete;
  RolloutEngine& operator=(const RolloutEngine&) = delete;

  // Checks the request (token ids, sampling values, that one sample can fit in the KV
  // cache) and queues its n samples. Throws Error naming the field; queues nothing then.
  void add_request(const GenerationRequest& request);
  bool has_unfinished() const;
  // One engine step; returns the samples that finished in it.
  std::vector<GeneratedSample> step();
  // Adds the requests and steps until all are done; samples ordered by request, then index.
  // `on_finished` (optional) is called after every step with the samples it finished
  // (none, often).
  std::vector<GeneratedSample> generate(
      const std::vector<GenerationRequest>& requests,
      const std::function<void(const std::vector<GeneratedSample>&)>& on_finished = {});

  // Loads new weights (all or some, by HF name) between steps and records their version.
  // A name or shape mismatch throws before anything changes. Samples in flight continue
  // on the new weights (partial rollouts): their KV blocks are dropped and recomputed, the
  // tokens drawn so far and their log-probs stay, and GeneratedSample::token_versions
  // says which weights drew each token.
  // `rewind`: the run went back to a checkpoint, so `version` may be at or below the current one.
  // Waiting sessions' kept blocks are dropped too (their next turn recomputes).
  void update_weights(const ModelWeights& weights, int64_t version, bool rewind = false);
  // The same from each tensor-parallel rank's local tensors (ModelBackend::update_weight_shards):
  // what the resharding weight sync delivers.
  void update_weight_shards(const std::vector<ModelWeights>& shards, int64_t version, bool rewind = false);
  int tensor_parallel() const;
  // LoRA adapters on the engine's model, zero until update_weights brings them by name (the
  // base weights staying as they are): applied unmerged where the backend can
  // (ModelBackend::applies_adapters: the CPU backend), else merged on the host from `base`,
  // the weights the engine was made with (rollout/merged_adapters.h).
  void add_adapters(const LoraSpec& spec, const ModelWeights& base);

  // The next turn of a session that ended one (GeneratedSample::session): `tokens` (the
  // tool's or environment's message, rendered) are appended after the turn's last token
  // and the sample goes on drawing, at most `max_new_tokens` this turn, with its
  // request's sampling, stops and seed stream (a counter per position: the tokens equal
  // those of a fresh request for the whole prefix). Throws Error (and changes nothing)
  // for an unknown session, ids outside the vocabulary, or a prefix past
  // max_position_embeddings or the cache.
  void continue_session(uint64_t session, const std::vector<int32_t>& tokens, int64_t max_new_tokens);
  // The trajectory is over: its blocks are freed. An unknown id is an Error.
  void close_session(uint64_t session);
  int64_t waiting_sessions() const;  // ended a turn, neither continued nor closed
  int64_t weight_version() const { return weight_version_; }

  const ModelConfig& config() const;
  const EngineStats& stats() const { return stats_; }
  // The model backend's name: "cpu", or "cuda bf16 (<device>)".
  std::string backend_name() const;

 private:
  void check_request(const GenerationRequest& request) const;
  // Errors name `where`; `label` formats an offending id's index ("prompt token {}").
  void check_token_ids(const std::string& where, const std::vector<int32_t>& ids, const char* label) const;
  // `length` tokens of `what` (prompt, conversation) plus max_new_tokens fit the model's
  // positions and the KV cache.
  void check_fits(const std::string& where, const char* what, int64_t length, int64_t max_new_tokens) const;
  void note_session_stats();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  EngineStats stats_;
  int64_t weight_version_ = 0;
};

}  // namespace tandem
