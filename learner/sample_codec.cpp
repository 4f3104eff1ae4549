#include "learner/sample_codec.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

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
    throw Error(fmt::format("training batch: {} runs past the end of its frame ({} bytes)", what, frame.size()));
  }
  std::vector<T> out(count);
  std::memcpy(out.data(), frame.data() + offset * sizeof(T), count * sizeof(T));
  offset += count;
  return out;
}

}  // namespace

EncodedBatch encode_training_batch(const std::vector<std::vector<TrainingSample>>& mini_batches) {
  nlohmann::json header = nlohmann::json::array();
  std::string tokens, values;
  for (const auto& batch : mini_batches) {
    nlohmann::json samples = nlohmann::json::array();
    for (const TrainingSample& s : batch) {
      const bool has_ref = !s.ref_logprobs.empty(), has_values = !s.returns.empty();
      const bool has_is_weights = !s.is_weights.empty();
      samples.push_back({s.prompt.size(), s.response.size(), has_ref, has_values, has_is_weights, s.stale});
      append(tokens, s.prompt);
      append(tokens, s.response);
      append(values, s.old_logprobs);
      append(values, s.advantages);
      if (has_ref) append(values, s.ref_logprobs);
      if (has_values) {
        append(values, s.old_values);
        append(values, s.returns);
      }
      if (has_is_weights) append(values, s.is_weights);
    }
    header.push_back(samples);
  }
  return {header.dump(), {tokens, values}};
}

std::vector<std::vector<TrainingSample>> decode_training_batch(const std::string& header_text,
                                                               const std::vector<std::string>& attachments) {
  if (attachments.size() != 2) {
    throw Error(fmt::format("training batch: expected 2 attachment frames (tokens, values), got {}", attachments.size()));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("training batch: the header is not JSON: {}", e.what()));
  }
  if (!header.is_array()) throw Error("training batch: the header must be an array of mini-batches");
  size_t token_offset = 0, value_offset = 0;
  std::vector<std::vector<TrainingSample>> out;
  for (size_t m = 0; m < header.size(); ++m) {
    if (!header[m].is_array()) throw Error(fmt::format("training batch: mini-batch {} is not an array", m));
    std::vector<TrainingSample> batch;
    for (size_t i = 0; i < header[m].size(); ++i) {
      const nlohmann::json& h = header[m][i];
      const std::string where = fmt::format("mini-batch {} sample {}", m, i);
      if (!h.is_array() || h.size() != 6 || !h[0].is_number_unsigned() || !h[1].is_number_unsigned() ||
          !h[2].is_boolean() || !h[3].is_boolean() || !h[4].is_boolean() || !h[5].is_boolean()) {
        throw Error(fmt::format("training batch: {}: expected [prompt_length, response_length, has_ref, has_values, "
                                "has_is_weights, stale], got {}",
                                where, h.dump()));
      }
      const size_t prompt = h[0].get<size_t>(), response = h[1].get<size_t>();
      TrainingSample s;
      s.prompt = take<int32_t>(attachments[0], token_offset, prompt, where + " prompt");
      s.response = take<int32_t>(attachments[0], token_offset, response, where + " response");
      s.old_logprobs = take<float>(attachments[1], value_offset, response, where + " old log-probs");
      s.advantages = take<float>(attachments[1], value_offset, response, where + " advantages");
      if (h[2].get<bool>()) s.ref_logprobs = take<float>(attachments[1], value_offset, response, where + " ref log-probs");
      if (h[3].get<bool>()) {
        s.old_values = take<float>(attachments[1], value_offset, response, where + " old values");
        s.returns = take<float>(attachments[1], value_offset, response, where + " returns");
      }
      if (h[4].get<bool>()) s.is_weights = take<float>(attachments[1], value_offset, response, where + " importance weights");
      s.stale = h[5].get<bool>();
      batch.push_back(std::move(s));
    }
    out.push_back(std::move(batch));
  }
  if (token_offset * 4 != attachments[0].size() || value_offset * 4 != attachments[1].size()) {
    throw Error(fmt::format("training batch: {} + {} bytes left over after the last sample",
                            attachments[0].size() - token_offset * 4, attachments[1].size() - value_offset * 4));
  }
  return out;
}

}  // namespace tandem
