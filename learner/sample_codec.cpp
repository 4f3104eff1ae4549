#include "learner/sample_codec.h"

#include "core/command_codec.h"
#include "core/error.h"

#include <cstring>

namespace tandem {

namespace {

template <class T>
void append(std::string& out, const std::vector<T>& values) {
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Reads `count` values of T at `offset` (in values), or throws naming `what`.
template <class T>
std::vector<T> take(const std::string& frame, size_t& offset, size_t count, const std::string& what) {
  if ((offset + count) * sizeof(T) > frame.size()) {
    throw Error(fmt::format("{} runs past the end of its frame ({} bytes)", what, frame.size()));
  }
  std::vector<T> out(count);
  std::memcpy(out.data(), frame.data() + offset * sizeof(T), count * sizeof(T));
  offset += count;
  return out;
}

}  // namespace

BatchFrames write_training_batch(wire::TrainingBatch::Builder out,
                                 const std::vector<std::vector<TrainingSample>>& mini_batches) {
  BatchFrames frames;
  auto batches = out.initMiniBatches(static_cast<unsigned>(mini_batches.size()));
  for (size_t m = 0; m < mini_batches.size(); ++m) {
    auto layouts = batches[m].initSamples(static_cast<unsigned>(mini_batches[m].size()));
    for (size_t i = 0; i < mini_batches[m].size(); ++i) {
      const TrainingSample& s = mini_batches[m][i];
      auto layout = layouts[i];
      layout.setPromptLength(static_cast<uint32_t>(s.prompt.size()));
      layout.setResponseLength(static_cast<uint32_t>(s.response.size()));
      layout.setHasRefLogprobs(!s.ref_logprobs.empty());
      layout.setHasValues(!s.returns.empty());
      layout.setHasIsWeights(!s.is_weights.empty());
      layout.setStale(s.stale);
      layout.setHasLossMask(!s.loss_mask.empty());
      append(frames.tokens, s.prompt);
      append(frames.tokens, s.response);
      append(frames.values, s.old_logprobs);
      append(frames.values, s.advantages);
      if (!s.ref_logprobs.empty()) append(frames.values, s.ref_logprobs);
      if (!s.returns.empty()) {
        append(frames.values, s.old_values);
        append(frames.values, s.returns);
      }
      if (!s.is_weights.empty()) append(frames.values, s.is_weights);
      if (!s.loss_mask.empty()) append(frames.values, s.loss_mask);
    }
  }
  return frames;
}

std::vector<std::vector<TrainingSample>> read_training_batch(wire::TrainingBatch::Reader batch,
                                                             const std::vector<std::string>& attachments,
                                                             const std::string& what) {
  if (attachments.size() != 2) {
    throw Error(fmt::format("{}: expected 2 attachment frames (tokens, values), got {}", what, attachments.size()));
  }
  size_t token_offset = 0, value_offset = 0;
  std::vector<std::vector<TrainingSample>> out;
  const auto mini_batches = batch.getMiniBatches();
  for (unsigned m = 0; m < mini_batches.size(); ++m) {
    std::vector<TrainingSample> samples;
    const auto layouts = mini_batches[m].getSamples();
    for (unsigned i = 0; i < layouts.size(); ++i) {
      const auto h = layouts[i];
      const std::string where = fmt::format("{}: mini-batch {} sample {}", what, m, i);
      const size_t response = h.getResponseLength();
      TrainingSample s;
      s.prompt = take<int32_t>(attachments[0], token_offset, h.getPromptLength(), where + " prompt");
      s.response = take<int32_t>(attachments[0], token_offset, response, where + " response");
      s.old_logprobs = take<float>(attachments[1], value_offset, response, where + " old log-probs");
      s.advantages = take<float>(attachments[1], value_offset, response, where + " advantages");
      if (h.getHasRefLogprobs()) s.ref_logprobs = take<float>(attachments[1], value_offset, response, where + " ref log-probs");
      if (h.getHasValues()) {
        s.old_values = take<float>(attachments[1], value_offset, response, where + " old values");
        s.returns = take<float>(attachments[1], value_offset, response, where + " returns");
      }
      if (h.getHasIsWeights()) {
        s.is_weights = take<float>(attachments[1], value_offset, response, where + " importance weights");
      }
      if (h.getHasLossMask()) s.loss_mask = take<float>(attachments[1], value_offset, response, where + " loss mask");
      s.stale = h.getStale();
      samples.push_back(std::move(s));
    }
    out.push_back(std::move(samples));
  }
  if (token_offset * 4 != attachments[0].size() || value_offset * 4 != attachments[1].size()) {
    throw Error(fmt::format("{}: {} + {} bytes left over after the last sample", what,
                            attachments[0].size() - token_offset * 4, attachments[1].size() - value_offset * 4));
  }
  return out;
}

EncodedBatch encode_training_batch(const std::vector<std::vector<TrainingSample>>& mini_batches) {
  BatchFrames frames;
  std::string body = encode_body<wire::TrainingBatch>(
      [&](wire::TrainingBatch::Builder out) { frames = write_training_batch(out, mini_batches); });
  return {std::move(body), frames.attachments()};
}

std::vector<std::vector<TrainingSample>> decode_training_batch(const std::string& body,
                                                               const std::vector<std::string>& attachments,
                                                               const std::string& what) {
  const Body<wire::TrainingBatch> batch(body, what);
  return read_training_batch(*batch, attachments, what);
}

}  // namespace tandem
