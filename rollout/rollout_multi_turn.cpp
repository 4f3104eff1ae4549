#include "rollout/rollout_multi_turn.h"

#include "actor/tokenizer.h"
#include "agent/configured_tools.h"
#include "core/error.h"

#include <algorithm>

namespace tandem {

RolloutMultiTurn::RolloutMultiTurn(const Config& config, const std::string& model_dir, const std::string& turn_frames,
                                   const std::string& environment_template, const std::vector<int32_t>& eos_ids)
    : config_(config.rollout.multi_turn), eos_ids_(eos_ids) {
  tokenizer_ = load_tokenizer(model_dir);
  parser_ = config.tools.empty() ? make_no_tool_parser() : make_tool_parser(config_.tool_parser, tokenizer_);
  nlohmann::json frames = nlohmann::json::parse(turn_frames, nullptr, false);
  TANDEM_CHECK(!frames.is_discarded(), "rollout_init: the turn frames are not JSON");
  turns_ = std::make_unique<ChatTurnTemplate>(turn_frames_from_json(frames), tokenizer_, eos_ids);
  std::vector<std::shared_ptr<Tool>> tools = make_configured_tools(config);
  double longest = 0;
  for (const ToolConfig& t : config.tools) longest = std::max(longest, t.timeout_s);
  if (config.has_environment()) {
    environment_ = make_configured_environment(config, nlohmann::json::parse(environment_template, nullptr, false));
    longest = std::max(longest, config.environment.timeout_s);
  }
  // Each tool keeps its own timeout; the runner's deadline only catches one that does not.
  runner_ = std::make_unique<ToolRunner>(std::move(tools), static_cast<int>(config_.tool_concurrency),
                                         std::chrono::milliseconds(static_cast<int64_t>(longest * 1500) + 5000));
}

RolloutMultiTurn::~RolloutMultiTurn() = default;

namespace {

// The samples of one rollout_generate as environment instances: each sample's reset()
// made its prompt; samples of a request whose prompts agree form one engine request.
struct EnvironmentRequests {
  std::vector<GenerationRequest> requests;  // what the engine runs (ids of their own)
  EnvironmentBinding binding;
  struct Origin {
    uint64_t request_id;
    int64_t sample_index;
    size_t start;  // in starts and prompts
  };
  std::map<std::pair<uint64_t, int64_t>, Origin> origins;  // engine (id, index) -> the controller's
  std::vector<std::unique_ptr<EnvironmentStart>> starts;
  std::vector<std::vector<int32_t>> prompts;  // per start
};

uint64_t mix_seed(uint64_t seed, uint64_t group) { return seed ^ (0x9e3779b97f4a7c15ULL * (group + 1)); }

}  // namespace

std::vector<Trajectory> RolloutMultiTurn::generate(RolloutEngine& engine, const std::vector<GenerationRequest>& requests,
                                                   const std::vector<std::string>& environment_rows,
                                                   const std::function<void()>& after_step, MultiTurnStats* stats) {
  MultiTurnOptions options;
  options.max_turns = config_.max_turns;
  options.max_total_tokens = config_.max_total_tokens;
  options.max_tool_output_tokens = config_.max_tool_output_tokens;
  options.max_new_tokens = requests.empty() ? 1 : requests.front().max_new_tokens;
  options.after_step = after_step;
  const std::shared_ptr<const Tokenizer> tokenizer = tokenizer_;
  // A message's text leaves out the end-of-turn tokens (an environment's action is the
  // answer, not its framing).
  const std::vector<int32_t> eos = eos_ids_;
  MultiTurnRollout rollout(engine, *turns_, *parser_, *runner_, options, [tokenizer, eos](const std::vector<int32_t>& ids) {
    std::vector<int32_t> text;
    for (int32_t id : ids) {
      if (std::find(eos.begin(), eos.end(), id) == eos.end()) text.push_back(id);
    }
    return tokenizer->decode(text);
  });
  if (!environment_) {
    std::vector<Trajectory> out = rollout.run(requests);
    *stats = rollout.stats();
    return out;
  }
  TANDEM_CHECK(environment_rows.size() == requests.size(), "rollout_generate: {} requests but {} environment rows",
               requests.size(), environment_rows.size());
  EnvironmentRequests env;
  env.binding.pool = environment_.get();
  uint64_t next_id = 1;
  try {
    for (size_t i = 0; i < requests.size(); ++i) {
      const nlohmann::json row = nlohmann::json::parse(environment_rows[i], nullptr, false);
      TANDEM_CHECK(row.is_object() && row.contains("row"), "rollout_generate: request {}'s environment row is not JSON",
                   requests[i].id);
      const std::string where = row.value("where", std::string("a row"));
      std::vector<std::pair<std::vector<int32_t>, std::vector<size_t>>> groups;  // prompt -> its starts
      const size_t first_start = env.starts.size();
      for (int64_t s = 0; s < requests[i].n; ++s) {
        try {
          env.starts.push_back(std::make_unique<EnvironmentStart>(
              environment_->start(row["row"], row.value("before", nlohmann::json::array()))));
        } catch (const Error& e) {
          throw Error(fmt::format("{}: {}", where, e.what()));
        }
        std::vector<int32_t> prompt = tokenizer_->encode(env.starts.back()->prompt);
        TANDEM_CHECK(!prompt.empty(), "{}: the environment's prompt is empty", where);
        auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == prompt; });
        if (group == groups.end()) groups.push_back({std::move(prompt), {}}), group = groups.end() - 1;
        group->second.push_back(env.starts.size() - 1);
        env.prompts.push_back(group->first);
      }
      for (size_t g = 0; g < groups.size(); ++g) {
        GenerationRequest r = requests[i];
        r.id = next_id++;
        r.prompt = groups[g].first;
        r.n = static_cast<int64_t>(groups[g].second.size());
        if (groups.size() > 1) r.seed = mix_seed(r.seed, g);
        for (size_t k = 0; k < groups[g].second.size(); ++k) {
          const size_t start = groups[g].second[k];
          env.origins[{r.id, static_cast<int64_t>(k)}] = {requests[i].id, static_cast<int64_t>(start - first_start), start};
          env.binding.instances[{r.id, static_cast<int64_t>(k)}] = env.starts[start]->id;
        }
        env.requests.push_back(std::move(r));
      }
    }
  } catch (...) {
    for (const auto& start : env.starts) environment_->close(start->id);
    throw;
  }
  std::vector<Trajectory> out = rollout.run(env.requests, &env.binding);
  for (Trajectory& t : out) {
    const EnvironmentRequests::Origin& origin = env.origins.at({t.request_id, t.sample_index});
    t.request_id = origin.request_id;
    t.sample_index = origin.sample_index;
    t.prompt = env.prompts[origin.start];
    for (const EnvironmentMessage& m : env.starts[origin.start]->messages) {
      TrajectoryMessage message;
      message.role = m.role;
      message.content = m.content;
      t.prompt_messages.push_back(std::move(message));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Trajectory& a, const Trajectory& b) {
    return a.request_id != b.request_id ? a.request_id < b.request_id : a.sample_index < b.sample_index;
  });
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
  nlohmann::json record = {{"stop", stop_reason_name(t.stop)},      {"turns", t.model_turns},
                            {"tool_calls", t.tool_calls},              {"tool_errors", t.tool_errors},
                            {"parse_errors", t.parse_errors},          {"tool_seconds", t.tool_seconds},
                            {"messages", std::move(messages)},         {"kinds", std::move(kinds)}};
  if (!t.prompt.empty()) {
    nlohmann::json prompt_messages = nlohmann::json::array();
    for (const TrajectoryMessage& m : t.prompt_messages) prompt_messages.push_back({{"role", m.role}, {"content", m.content}});
    record["prompt"] = t.prompt;
    record["prompt_messages"] = std::move(prompt_messages);
    record["environment_steps"] = t.environment_steps;
    record["environment_reward"] = t.environment_reward;
  }
  return record;
}

}  // namespace tandem
