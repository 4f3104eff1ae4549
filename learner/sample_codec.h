// Training batches on the wire: a TrainingBatch (learner_commands.capnp: per mini-batch,
// per sample, the prompt and response lengths and which per-token fields follow) and two
// binary attachment frames (int32 token ids; float32 per-token values), never text
// numbers. Decoding checks every length against the frames: a truncated or inconsistent
// message is an Error naming the sample, not a crash.
#pragma once

#include "learner/learner_commands.capnp.h"
#include "learner/train_batch.h"

#include <string>
#include <vector>

namespace tandem {

struct BatchFrames {
  std::string tokens, values;
  std::vector<std::string> attachments() const { return {tokens, values}; }
};

// Fills `out` with the layout of `mini_batches` and returns the frames.
BatchFrames write_training_batch(wire::TrainingBatch::Builder out,
                                 const std::vector<std::vector<TrainingSample>>& mini_batches);
// `what`: the command, for errors.
std::vector<std::vector<TrainingSample>> read_training_batch(wire::TrainingBatch::Reader batch,
                                                             const std::vector<std::string>& attachments,
                                                             const std::string& what);

// A whole command body that is a TrainingBatch (learner_train, learner_values, ...).
struct EncodedBatch {
  std::string body;
  std::vector<std::string> attachments;  // [tokens, values]
};
EncodedBatch encode_training_batch(const std::vector<std::vector<TrainingSample>>& mini_batches);
std::vector<std::vector<TrainingSample>> decode_training_batch(const std::string& body,
                                                               const std::vector<std::string>& attachments,
                                                               const std::string& what = "training batch");

}  // namespace tandem
