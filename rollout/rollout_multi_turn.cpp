#include "rollout/rollout_multi_turn.h"

#include "actor/tokenizer.h"
#include "agent/configured_tools.h"
#include "core/error.h"

#include <algorithm>

namespace tandem {

RolloutMultiTurn::RolloutMultiTurn(const Config& config, const std::string& model_dir, const std::string& turn_frames,
                                   const std::vector<int32_t>& eos_ids)
    : config_(config.rollout.multi_turn) {
  tokenizer_ = load_tokenizer(model_dir);
  parser_ = make_tool_parser(config_.tool_parser, tokenizer_);
  nlohmann::json frames = nlohmann::json::parse(turn_frames, nullptr, false);
  TANDEM_CHECK(!frames.is_discarded(), "rollout_init: the turn frames are not JSON");
  turns_ = std::make_unique<ChatTurnTemplate>(turn_frames_from_json(frames), tokenizer_, eos_ids);
  std::vector<std::shared_ptr<Tool>> tools = make_configured_tools(config);
  double longest = 0;
  for (const ToolConfig& t : config.tools) longest = std::max(longest, t.timeout_s);
  // Each tool keeps its own timeout; the runner's deadline only catches one that does not.
  runner_ = std::make_unique<ToolRunner>(std::move(tools), static_cast<int>(config_.tool_concurrency),
                                         std::chrono::milliseconds(static_cast<int64_t>(longest * 1500) + 5000));
}

std::vector<Trajectory> RolloutMultiTurn::generate(RolloutEngine& engine, const std::vector<GenerationRequest>& requests,
                                                   const std::function<void()>& after_step, MultiTurnStats* stats) {
  MultiTurnOptions options;
  options.max_turns = config_.max_turns;
  options.max_total_tokens = config_.max_total_tokens;
  options.max_tool_output_tokens = config_.max_tool_output_tokens;
  options.max_new_tokens = requests.empty() ? 1 : requests.front().max_new_tokens;
  options.after_step = after_step;
  const std::shared_ptr<const Tokenizer> tokenizer = tokenizer_;
  MultiTurnRollout rollout(engine, *turns_, *parser_, *runner_, options,
                           [tokenizer](const std::vector<int32_t>& ids) { return tokenizer->decode(ids); });
  std::vector<Trajectory> out = rollout.run(requests);
  *stats = rollout.stats();
  return out;
}

nlohmann::json trajectory_record(const Trajectory& t) {
  nlohmann::json messages = nlohmann::json::array();
  for (const TrajectoryMessage& m : t.messages) {
    nlohmann::json message = {{"role", m.role}, {"content", m.content}, {"begin", m.begin}, {"end", m.end}, {"turn", m.turn}};
    if (!m.name.empty()) message["name"] = m.name;
    messages.push_back(std::move(message));
  }
  nlohmann::json kinds = nlohmann::json::array();
  for (size_t k = 0; k < t.kinds.size(); ++k) {
    if (k == 0 || t.kinds[k] != t.kinds[k - 1]) kinds.push_back({k, token_kind_name(t.kinds[k])});
  }
  return {{"stop", stop_reason_name(t.stop)},      {"turns", t.model_turns},        {"tool_calls", t.tool_calls},
          {"tool_errors", t.tool_errors},          {"parse_errors", t.parse_errors}, {"tool_seconds", t.tool_seconds},
          {"messages", std::move(messages)},       {"kinds", std::move(kinds)}};
}

}  // namespace tandem
