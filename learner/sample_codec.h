// Training batches on the wire: a JSON header (per mini-batch, per sample: prompt and
// response lengths, whether reference log-probs follow, whether critic values and returns follow) and two binary attachment frames
// (int32 token ids; float32 per-token values), never text numbers. Decoding checks every
// length against the frames: a truncated or inconsistent message is an Error naming the
// sample, not a crash.
#pragma once

#include "learner/train_batch.h"

#include <string>
#include <vector>

namespace tandem {

struct EncodedBatch {
  std::string header;                    // JSON
  std::vector<std::string> attachments;  // [tokens, values]
};

EncodedBatch encode_training_batch(const std::vector<std::vector<TrainingSample>>& mini_batches);
std::vector<std::vector<TrainingSample>> decode_training_batch(const std::string& header,
                                                               const std::vector<std::string>& attachments);

}  // namespace tandem
