// The controller's side of the rollout worker's commands (rollout/rollout_commands.capnp):
// command bodies built from typed arguments, replies read back and checked, so that the
// training loop never touches the wire format.
#pragma once

#include "controller/workers/worker_pool.h"
#include "weight_sync/transport.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::rollout_client {

// rollout_init: the run's resolved config (YAML), the model directory, the tokenizer's
// size where the checkpoint pads its vocabulary (0: every row), and (multi-turn) the chat
// template's turn frames as JSON (RunInputs::turn_frames; "" for single-turn runs).
std::string init_body(const std::string& config_yaml, const std::string& model_dir, int64_t sampled_vocab_size,
                      const std::string& turn_frames = "", const std::string& environment_template = "");

struct PromptRequest {
  uint64_t id = 0;  // the prompt's slot in the step
  const std::vector<int32_t>* prompt = nullptr;
  int64_t n = 1;
  uint64_t seed = 0;
  std::optional<double> temperature;  // evaluation's own (0: greedy); else rollout's sampling
  const std::string* environment_row = nullptr;  // with an environment: RunInputs::environment_rows[row]
};

struct GenerateCommand {
  std::string body;
  std::string tokens;  // the one attachment frame: every prompt's int32 tokens in order
};
GenerateCommand generate_command(const std::vector<PromptRequest>& requests, bool stream, bool interruptible);

struct ReturnedSample {
  uint64_t request_id = 0;
  int64_t sample_index = 0;
  std::string finish_reason;
  int64_t weight_version = 0;
  std::vector<std::pair<uint32_t, int64_t>> version_runs;  // (first token, version)
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string multi_turn;  // the trajectory's record, JSON (rollout/rollout_multi_turn.h); "" single-turn
};

struct GenerateStats {
  int64_t decode_tokens = 0, prefill_tokens = 0, prefill_tokens_saved = 0, preemptions = 0;
  int64_t session_tokens_reused = 0, evicted_sessions = 0, kv_pinned_blocks_max = 0;  // multi-turn
};

struct ReturnedSamples {
  std::vector<ReturnedSample> samples;
  GenerateStats stats;  // zero in progress messages
};

// A rollout_generate reply or progress: throws Error naming the worker when the body or
// the frames do not hold what it declares.
ReturnedSamples read_samples(const CommandReply& reply);

// rollout_load_weights: from the learner in this process, or over a transport.
std::string load_local_body(bool rewind);
std::string load_transport_body(const WeightSyncOptions& options, bool rewind);
// The version a rollout_load_weights reply says was loaded.
int64_t loaded_version(const CommandReply& reply);

}  // namespace tandem::rollout_client
