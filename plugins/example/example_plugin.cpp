// An example tandem plugin: one reward function, one advantage estimator, one policy
// loss, one tool and one environment, registered under names a config can use:
//
//   algorithm: {plugin: build/plugins/example/libtandem_example_plugin.so,
//               advantage: group_median, policy_loss: vanilla_pg}
//   reward: [{plugin: build/plugins/example/libtandem_example_plugin.so, name: exact_answer}]
//   tools: [{plugin: build/plugins/example/libtandem_example_plugin.so, name: count_letters}]
//   environment: {plugin: build/plugins/example/libtandem_example_plugin.so, name: say_number}
#include <tandem/plugin.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
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

// The integer after `"key":` in a JSON object's text (a plugin gets rows and arguments as
// JSON text; a real one would use a JSON library).
long json_integer(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) throw std::runtime_error("no integer \"" + key + "\" in " + json);
  return std::stol(json.substr(at + key.size() + 3));
}

// A tool: how many letters a word has ({"word": "..."}).
std::string count_letters(const std::string& arguments_json) {
  const size_t at = arguments_json.find("\"word\":");
  if (at == std::string::npos) throw std::runtime_error("give {\"word\": TEXT}");
  const size_t open = arguments_json.find('"', at + 7), close = arguments_json.find('"', open + 1);
  if (open == std::string::npos || close == std::string::npos) throw std::runtime_error("give {\"word\": TEXT}");
  return std::to_string(close - open - 1);
}

// An environment: the model must say the row's `number`; -0.25 for each wrong turn, 1 for
// the right one.
class SayNumber : public tandem::Environment {
 public:
  explicit SayNumber(long number) : number_(std::to_string(number)) {}
  std::vector<tandem::EnvironmentMessage> reset() override {
    return {{"system", "Be brief."}, {"user", "Say " + number_ + "."}};
  }
  tandem::EnvironmentStepResult step(const std::string& action) override {
    if (action.find(number_) != std::string::npos) return {{{"user", "Right."}}, 1.0, true};
    return {{{"user", "No. Say " + number_ + "."}}, -0.25, false};
  }

 private:
  std::string number_;
};

void register_all(tandem::PluginRegistry& registry) {
  registry.add_tool("count_letters", {"Counts the letters of a word.",
                                      R"({"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]})",
                                      count_letters});
  registry.add_environment("say_number", [](const std::string& row_json, const std::string&) {
    return std::make_unique<SayNumber>(json_integer(row_json, "number"));
  });
  registry.add_reward("exact_answer", exact_answer);
  registry.add_advantage_estimator("group_median", group_median);
  registry.add_policy_loss("vanilla_pg", vanilla_pg);
}

}  // namespace

TANDEM_PLUGIN(register_all)
