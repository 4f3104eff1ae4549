#include "rollout/reward_model_role.h"

#include "actor/model_weights.h"
#include "core/command_codec.h"
#include "core/error.h"
#include "core/log.h"
#include "core/worker_commands.capnp.h"
#include "kernels/device_probe.h"
#include "rollout/rollout_commands.capnp.h"
#include "rollout/sequence_scorer.h"

#include <cstring>
#include <map>
#include <memory>

namespace tandem {

namespace {

struct RewardModelState {
  std::unique_ptr<SequenceScorer> scorer;

  CommandResult init(const CommandMsg& command, const std::vector<std::string>&) {
    const Body<wire::RewardModelInit> body(command.body, command.name);
    const std::string dir = to_string(body->getModel());
    const ModelConfig config = read_sequence_classifier_config(dir);
    ScoringLimits limits;
    limits.max_sequence_tokens = body->getMaxSequenceTokens();
    limits.pass_tokens = body->getPassTokens();
    limits.pass_sequences = body->getPassSequences();
    EngineOptions base;
    base.device = resolve_device(to_string(body->getDevice()), "reward model device");
    base.dtype = to_string(body->getDtype());
    base.threads = static_cast<int>(body->getThreads());
    const EngineOptions options = scoring_engine_options(config, limits, base);
    scorer.reset();  // a second init frees the first model first
    scorer = std::make_unique<SequenceScorer>(make_model_backend(config, load_model_weights(dir, config), options),
                                              options, limits);
    log::info("reward model {} on {}: {} labels, {} KV blocks", dir, scorer->backend().name(), scorer->labels(),
              scorer->backend().kv_blocks());
    return {encode_body<wire::RewardModelReady>([&](wire::RewardModelReady::Builder out) {
              out.setBackend(scorer->backend().name());
              out.setLabels(scorer->labels());
            }),
            {}};
  }

  CommandResult score(const CommandMsg& command, const std::vector<std::string>& attachments) {
    if (!scorer) throw Error(fmt::format("{}: send reward_model_init first", command.name));
    const Body<wire::RewardModelScore> body(command.body, command.name);
    if (attachments.size() != 1 || attachments[0].size() % sizeof(int32_t) != 0) {
      throw Error(fmt::format("{}: wants one frame of int32 tokens; got {} frames", command.name, attachments.size()));
    }
    std::vector<int32_t> tokens(attachments[0].size() / sizeof(int32_t));
    std::memcpy(tokens.data(), attachments[0].data(), attachments[0].size());
    std::vector<uint32_t> lengths;
    for (uint32_t length : body->getLengths()) lengths.push_back(length);
    const std::vector<float> scores = scorer->score(tokens, lengths);
    std::string frame(scores.size() * sizeof(float), '\0');
    std::memcpy(frame.data(), scores.data(), frame.size());
    return {empty_body<wire::Empty>(), {std::move(frame)}};
  }
};

using RewardModelMethod = CommandResult (RewardModelState::*)(const CommandMsg&, const std::vector<std::string>&);

const std::map<std::string, RewardModelMethod>& reward_model_commands() {
  static const std::map<std::string, RewardModelMethod> table = {
      {"reward_model_init", &RewardModelState::init},
      {"reward_model_score", &RewardModelState::score},
  };
  return table;
}

}  // namespace

CommandHandler reward_model_command_handler() {
  auto state = std::make_shared<RewardModelState>();
  return [state](const CommandMsg& command, const std::vector<std::string>& attachments) -> CommandResult {
    const auto found = reward_model_commands().find(command.name);
    if (found == reward_model_commands().end()) {
      throw unknown_command("reward_model", command.name, reward_model_commands());
    }
    return ((*state).*(found->second))(command, attachments);
  };
}

std::vector<std::string> reward_model_command_names() {
  std::vector<std::string> names;
  for (const auto& entry : reward_model_commands()) names.push_back(entry.first);
  return names;
}

}  // namespace tandem
