#include "learner/train_batch.h"

#include "core/error.h"

#include <ATen/ATen.h>

namespace tandem {

MicroBatch make_micro_batch(const std::vector<TrainingSample>& samples, size_t begin, size_t end, at::Device device) {
  TANDEM_CHECK(begin < end && end <= samples.size(), "micro-batch [{}, {}) of {} samples", begin, end, samples.size());
  const int64_t rows = static_cast<int64_t>(end - begin);
  int64_t longest = 1;
  bool all_have_ref = true, all_have_values = true, any_is_weights = false, any_stale = false;
  std::vector<std::vector<int32_t>> sequences;
  for (size_t i = begin; i < end; ++i) {
    const TrainingSample& s = samples[i];
    const size_t n = s.response.size();
    TANDEM_CHECK(!s.prompt.empty(), "training sample {}: the prompt is empty", i);
    TANDEM_CHECK(s.old_logprobs.size() == n && s.advantages.size() == n,
                 "training sample {}: {} response tokens but {} old log-probs and {} advantages", i, n,
                 s.old_logprobs.size(), s.advantages.size());
    TANDEM_CHECK(s.ref_logprobs.empty() || s.ref_logprobs.size() == n,
                 "training sample {}: {} response tokens but {} reference log-probs", i, n, s.ref_logprobs.size());
    TANDEM_CHECK(s.old_values.size() == s.returns.size() && (s.returns.empty() || s.returns.size() == n),
                 "training sample {}: {} response tokens but {} old values and {} returns", i, n, s.old_values.size(),
                 s.returns.size());
    TANDEM_CHECK(s.is_weights.empty() || s.is_weights.size() == n,
                 "training sample {}: {} response tokens but {} importance weights", i, n, s.is_weights.size());
    TANDEM_CHECK(!(s.stale && !s.is_weights.empty()),
                 "training sample {}: stale samples get their importance weights in the learner, not sent ones", i);
    TANDEM_CHECK(s.loss_mask.empty() || s.loss_mask.size() == n,
                 "training sample {}: {} response tokens but a loss mask of {}", i, n, s.loss_mask.size());
    any_is_weights = any_is_weights || !s.is_weights.empty();
    any_stale = any_stale || s.stale;
    all_have_ref = all_have_ref && !s.ref_logprobs.empty();
    all_have_values = all_have_values && (n == 0 || !s.returns.empty());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(n));
    std::vector<int32_t> sequence = s.prompt;
    sequence.insert(sequence.end(), s.response.begin(), s.response.end());
    sequences.push_back(std::move(sequence));
  }
  MicroBatch batch;
  batch.layout = padded_layout(sequences).to(device);
  std::vector<int64_t> position(rows * longest, 0);
  const size_t cells = static_cast<size_t>(rows * longest);
  std::vector<float> mask(cells, 0), old_lp(cells, 0), adv(cells, 0), ref(cells, 0), old_v(cells, 0), ret(cells, 0),
      is_weights(cells, 1), stale(cells, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const TrainingSample& s = samples[begin + r];
    for (size_t t = 0; t < s.response.size(); ++t) {
      const int64_t k = r * longest + static_cast<int64_t>(t);
      position[k] = static_cast<int64_t>(s.prompt.size() + t);
      mask[k] = s.loss_mask.empty() ? 1.0f : s.loss_mask[t];
      old_lp[k] = s.old_logprobs[t];
      adv[k] = s.advantages[t];
      if (all_have_ref) ref[k] = s.ref_logprobs[t];
      if (!s.is_weights.empty()) is_weights[k] = s.is_weights[t];
      if (s.stale) stale[k] = 1;
      if (all_have_values) {
        old_v[k] = s.old_values[t];
        ret[k] = s.returns[t];
      }
    }
  }
  // Built in host memory, then copied to the device once each.
  auto floats = [&](const std::vector<float>& v) { return at::tensor(v, at::kFloat).view({rows, longest}).to(device); };
  batch.response_position = at::tensor(position, at::kLong).view({rows, longest}).to(device);
  batch.mask = floats(mask);
  batch.old_logprobs = floats(old_lp);
  batch.advantages = floats(adv);
  if (all_have_ref) batch.ref_logprobs = floats(ref);
  if (any_is_weights) batch.is_weights = floats(is_weights);
  if (any_stale) batch.stale = floats(stale);
  if (all_have_values) {
    batch.old_values = floats(old_v);
    batch.returns = floats(ret);
  }
  return batch;
}

at::Tensor response_values(const at::Tensor& per_position, const MicroBatch& batch) {
  return per_position.gather(1, batch.response_position) * batch.mask;
}

}  // namespace tandem
