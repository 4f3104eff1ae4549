// An example tandem plugin: one reward function, one advantage estimator and one policy
// loss, registered under names a config can use:
//
//   algorithm: {plugin: build/plugins/example/libtandem_example_plugin.so,
//               advantage: group_median, policy_loss: vanilla_pg}
//   reward: [{plugin: build/plugins/example/libtandem_example_plugin.so, name: exact_answer}]
#include <tandem/plugin.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <vector>

namespace {

std::string trimmed(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

// 1 when the response, without surrounding white space, is the row's `answer`.
tandem::RewardResult exact_answer(const tandem::RewardInput& in) {
  auto answer = in.row.find("answer");
  if (answer == in.row.end()) throw std::runtime_error("the dataset row has no \"answer\" field");
  const double score = trimmed(in.response) == trimmed(answer->second) ? 1.0 : 0.0;
  return {score, {{"exact", score}}};
}

// A_i = r_i - median of its group's rewards (the lower median for even groups), on
// every valid token: a baseline that one outlier in the group cannot drag.
tandem::AdvantageResult group_median(const tandem::AdvantageInputs& in, const tandem::AdvantageParams&) {
  at::Tensor rewards = in.rewards.to(at::kDouble).contiguous();
  const int64_t count = rewards.size(0), group = in.group_size;
  if (group < 1 || count % group != 0) throw std::invalid_argument("group_median: samples must fill whole groups");
  std::vector<double> advantage(static_cast<size_t>(count));
  const double* r = rewards.data_ptr<double>();
  for (int64_t g = 0; g < count; g += group) {
    std::vector<double> members(r + g, r + g + group);
    std::nth_element(members.begin(), members.begin() + (group - 1) / 2, members.end());
    const double median = members[static_cast<size_t>((group - 1) / 2)];
    for (int64_t i = g; i < g + group; ++i) advantage[static_cast<size_t>(i)] = r[i] - median;
  }
  at::Tensor per_sample = at::tensor(advantage, at::kDouble).unsqueeze(1);
  tandem::AdvantageResult out;
  out.advantages = (per_sample * in.mask.to(at::kDouble)).to(in.rewards.scalar_type());
  return out;
}

// REINFORCE without a ratio or clip: loss_t = -A_t * logprobs_t (on-policy only).
tandem::PolicyLossResult vanilla_pg(const tandem::PolicyLossInputs& in, const tandem::PolicyLossParams&) {
  at::Tensor mask = in.mask.to(in.logprobs.scalar_type());
  tandem::PolicyLossResult out;
  out.loss = -in.advantages * in.logprobs * mask;
  at::Tensor ratio = (in.logprobs.detach() - in.old_logprobs).exp();
  out.ratio = at::where(mask.gt(0), ratio, at::ones_like(ratio));
  out.clipped = at::zeros_like(mask, at::kBool);
  return out;
}

void register_all(tandem::PluginRegistry& registry) {
  registry.add_reward("exact_answer", exact_answer);
  registry.add_advantage_estimator("group_median", group_median);
  registry.add_policy_loss("vanilla_pg", vanilla_pg);
}

}  // namespace

TANDEM_PLUGIN(register_all)
