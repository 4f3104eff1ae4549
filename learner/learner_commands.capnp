# The learner worker's commands and replies (learner/learner_role.cpp serves them;
# controller/learner_client.cpp sends them). Samples' token ids and per-token values
# travel as two attachment frames (int32, float32) laid out by a TrainingBatch.
@0x87d54f625faa350d;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

using WeightSync = import "/weight_sync/weight_sync.capnp";

# learner_init. Reply: LearnerReady.
struct LearnerInit {
  config @0 :Text;               # the run's resolved config, as YAML
  model @1 :Text;
  sampledVocabSize @2 :Int64;    # 0: every row of the checkpoint's vocabulary
  totalOptimizerSteps @3 :Int64 = 1;
  rendezvous @4 :Text;           # the Gloo rendezvous directory ("" with one rank)
  rank @5 :Int32;
  worldSize @6 :Int32;
  host @7 :Text;                 # this rank's address as the controller saw it register ("": loopback)
  localRank @8 :Int32 = -1;      # among the learner ranks on its machine (its GPU); -1: its rank
  threads @9 :Int32;             # intra-op threads; 0 keeps libtorch's choice
  rewardModel @10 :Bool;         # tandem train-rm: a score head, trained on preference pairs
}

struct LearnerReady {
  intraOpThreads @0 :Int32;
}

# torch_info's reply (its command is Empty).
struct TorchInfo {
  libtorch @0 :Text;
  intraOpThreads @1 :Int32;
}

# One sample's place in the frames: prompt then response tokens in the token frame;
# old log-probs, advantages, then (when present) reference log-probs, old values and
# returns, importance weights, loss mask in the value frame, each response-length long.
struct SampleLayout {
  promptLength @0 :UInt32;
  responseLength @1 :UInt32;
  hasRefLogprobs @2 :Bool;
  hasValues @3 :Bool;            # old values and returns (advantage: gae)
  hasIsWeights @4 :Bool;
  stale @5 :Bool;
  hasLossMask @6 :Bool;          # multi-turn: 1 on the policy's tokens, 0 on observations and template tokens
}

struct MiniBatch {
  samples @0 :List(SampleLayout);
}

struct TrainingBatch {
  miniBatches @0 :List(MiniBatch);
}

# learner_train: TrainingBatch (this rank's share of each mini-batch). Reply: TrainResult.
struct Metric {
  name @0 :Text;                 # actor/pg_loss, critic/value_loss, ...
  value @1 :Float64;
}

struct TrainResult {
  metrics @0 :List(Metric);
  optimizerSteps @1 :Int64;
  tokens @2 :Int64;
}

# learner_preference_step: one reward-model step on this rank's pairs (a TrainingBatch of
# one mini-batch: samples 2i chosen, 2i + 1 rejected). Reply: TrainResult with rm/loss,
# rm/accuracy, rm/margin, rm/pairs, rm/grad_norm, rm/lr.
# learner_reward_scores: a TrainingBatch of one mini-batch; the reply is Empty with one
# float32 frame, each sample's score.

# learner_sft: one supervised step on one mini-batch. Reply: SftResult.
struct LearnerSft {
  batch @0 :TrainingBatch;
  lr @1 :Float64;
}

struct SftResult {
  loss @0 :Float64;
  gradNorm @1 :Float64;
  tokens @2 :Int64;
}

# learner_values, learner_logprobs, learner_probe_logprobs, learner_ref_logprobs: a TrainingBatch of one
# mini-batch; the reply is Empty with one float32 frame, every sample's values in order.

# learner_publish. Reply: Published.
struct LearnerPublish {
  version @0 :Int64;
  local @1 :Bool;                                  # to the rollout engine in this process
  transport @2 :WeightSync.WeightSyncTransport;    # unset: no transport (local only, or gathering only)
}

struct Published {
  bytes @0 :Int64;
  buckets @1 :Int64;
}

# learner_free_port. Reply: FreePort.
struct FreePortRequest {
  host @0 :Text;
}

struct FreePort {
  port @0 :Int32;
}

# learner_nccl_id (Empty). Reply: NcclId.
struct NcclId {
  uniqueId @0 :Data;
}

# learner_save and learner_load. Reply: CheckpointDone.
struct CheckpointRequest {
  dir @0 :Text;
  tokenizerFrom @1 :Text;        # learner_save: a tokenizer to copy in ("" none)
}

struct CheckpointDone {
  optimizerSteps @0 :Int64;
}

# learner_snapshot (reply: Empty) and learner_load_snapshot (reply: SnapshotLoaded):
# learner.snapshot, each rank's own state in its host's memory.
struct SnapshotRequest {
  dir @0 :Text;                  # the slot: DIR/rank-<r>.snapshot, rewritten in place
  referenceDir @1 :Text;         # the warmed-up reference policy, written once
  root @2 :Text;                 # everything of the run's snapshots: removed when the worker ends
  step @3 :Int64;                # the run's step it holds (load: the step expected)
  sourceRank @4 :Int32;          # the rank whose file holds this rank's state: itself, or under
                                 # ddp (every rank holds the same) the first rank on its host
}

struct SnapshotLoaded {
  loaded @0 :Bool;
  problem @1 :Text;              # why not (missing on this host, does not fit): the caller falls back
  optimizerSteps @2 :Int64;
}

# learner_export. Reply: Empty.
struct ExportRequest {
  dir @0 :Text;
  tokenizerFrom @1 :Text;
  dtype @2 :Text;                # model.dtype: float32 | bfloat16 | float16
  configExtra @3 :Text;          # a JSON object merged into config.json (train-rm: mean, std); "": none
}
