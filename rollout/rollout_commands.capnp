# The rollout worker's commands and replies (rollout/rollout_role.cpp serves them;
# controller/rollout_client.cpp sends them). Token ids and log-probs travel as
# attachment frames (int32, float32), never inside these bodies.
@0x89578750ee8050ab;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

using WeightSync = import "/weight_sync/weight_sync.capnp";

# rollout_init: build the engine. Reply: Empty.
struct RolloutInit {
  config @0 :Text;             # the run's resolved config, as YAML
  model @1 :Text;              # model directory (or preset)
  sampledVocabSize @2 :Int64;  # the tokenizer's ids when the checkpoint pads its vocabulary; 0: all rows
  # Multi-turn (the config lists tools): the chat template's turn frames, derived by the
  # controller (agent/chat_turn_template.h, turn_frames_to_json), and the tools' schemas
  # it put in the prompts, both JSON.
  turnFrames @3 :Text;
  # With an environment: the chat template its reset() messages are rendered with, JSON
  # {"source", "special_tokens", "variables"} (agent/python_environment.h).
  environmentTemplate @4 :Text;
}

struct GenerationRequest {
  id @0 :UInt64;
  promptLength @1 :UInt32;     # tokens of this request in the prompt frame, in request order
  n @2 :Int64;                 # samples of the prompt
  seed @3 :UInt64;
  # Evaluation brings its own temperature (0: greedy), with top_p 1 and top_k 0;
  # otherwise rollout.temperature, top_p and top_k apply.
  ownTemperature @4 :Bool;
  temperature @5 :Float64;
  # With an environment: the dataset row its instances are made from, JSON {"row": {...},
  # "before": [messages the prompt shows before reset()'s], "where": "file:line"}. The
  # prompt tokens are then a placeholder: each sample's prompt is made by reset().
  environmentRow @6 :Text;
}

# rollout_generate: one attachment frame, every prompt's int32 tokens back to back.
# Reply and progress: RolloutSamples with two frames (tokens int32, log-probs float32).
struct RolloutGenerate {
  requests @0 :List(GenerationRequest);
  stream @1 :Bool;             # finished samples go back as progress while the rest generate
  interruptible @2 :Bool;      # rollout_load_weights may run between engine steps (partial rollouts)
}

# Tokens [firstToken, next run's firstToken) were drawn with weight version `version`.
struct VersionRun {
  firstToken @0 :UInt32;
  version @1 :Int64;
}

struct GeneratedSample {
  requestId @0 :UInt64;
  sampleIndex @1 :Int64;
  length @2 :UInt32;           # tokens of this sample in the frames, in sample order
  finishReason @3 :Text;       # stop | length | ...
  weightVersion @4 :Int64;     # the version of the first token
  versionRuns @5 :List(VersionRun);
  # Multi-turn: the trajectory's record as JSON (rollout/rollout_multi_turn.h:
  # stop reason, counters, messages with token spans, token kinds as runs); the frames
  # hold all its tokens after the prompt, log-probs 0 on those the policy did not draw.
  multiTurn @6 :Text;
}

struct GenerateStats {
  decodeTokens @0 :Int64;
  prefillTokens @1 :Int64;
  prefillTokensSaved @2 :Int64;
  preemptions @3 :Int64;
  sessionTokensReused @4 :Int64;   # multi-turn: prefill the kept KV blocks saved
  evictedSessions @5 :Int64;
  kvPinnedBlocksMax @6 :Int64;
}

struct RolloutSamples {
  samples @0 :List(GeneratedSample);
  stats @1 :GenerateStats;     # the reply's; progress leaves it unset
}

# rollout_load_weights. Reply: RolloutWeightsLoaded.
struct RolloutLoadWeights {
  union {
    local @0 :Void;                              # from the learner in this process
    transport @1 :WeightSync.WeightSyncTransport;
  }
  rewind @2 :Bool;             # going back to a checkpoint's (older) version is intended
}

struct RolloutWeightsLoaded {
  version @0 :Int64;
}

# The reward-model worker's commands (rollout/reward_model_role.cpp serves them;
# controller/run/reward_model_workers.cpp sends them).

# reward_model_init: load a sequence classifier (a reward model directory) onto a backend
# sized for scoring passes. Reply: RewardModelReady.
struct RewardModelInit {
  model @0 :Text;                # the classifier's directory
  device @1 :Text;               # cpu | cuda | auto
  dtype @2 :Text;                # cuda: bf16 | fp32
  threads @3 :Int64;             # cpu: threads of its forwards; 0: all cores
  maxSequenceTokens @4 :Int64;   # the longest prompt + response it will be sent
  passTokens @5 :Int64;          # tokens of one forward pass (longer sequences go in chunks)
  passSequences @6 :Int64;       # sequences of one forward pass
}

struct RewardModelReady {
  backend @0 :Text;              # ModelBackend::name(): "cpu", "cuda bf16 (<device>)"
  labels @1 :Int64;              # scores per sequence (score.weight's rows)
}

# reward_model_score: one attachment frame, every sequence's int32 tokens back to back.
# Reply: Empty, and one float32 frame: each sequence's `labels` scores, read at its last
# token through the final norm and score.weight.
struct RewardModelScore {
  lengths @0 :List(UInt32);      # tokens of each sequence in the frame, in order; each >= 1
}
