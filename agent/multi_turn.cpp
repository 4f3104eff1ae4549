#include "agent/multi_turn.h"

#include "core/error.h"
#include "core/trace.h"

#include <algorithm>

namespace tandem {

const char* token_kind_name(TokenKind kind) {
  switch (kind) {
    case TokenKind::policy: return "policy";
    case TokenKind::observation: return "observation";
    case TokenKind::template_: return "template";
  }
  return "?";
}

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::eos: return "eos";
    case StopReason::length: return "length";
    case StopReason::max_turns: return "max_turns";
    case StopReason::max_total_tokens: return "max_total_tokens";
    case StopReason::tool_timeout: return "tool_timeout";
    case StopReason::tool_error: return "tool_error";
    case StopReason::env_done: return "env_done";
  }
  return "?";
}

const std::vector<StopReason>& all_stop_reasons() {
  static const std::vector<StopReason> all = {StopReason::eos,        StopReason::length,       StopReason::max_turns,
                                              StopReason::max_total_tokens, StopReason::tool_timeout,
                                              StopReason::tool_error, StopReason::env_done};
  return all;
}

namespace {

// An environment's step as a tool call ({"id", "action"}), so that steps run on the
// ToolRunner with the tools' concurrency and deadline.
class EnvironmentStepTool : public Tool {
 public:
  explicit EnvironmentStepTool(EnvironmentPool& pool) : pool_(pool) {}
  std::string name() const override { return "environment"; }
  nlohmann::ordered_json schema() const override { return nullptr; }
  ToolResult call(const nlohmann::json& arguments) override {
    const EnvironmentStep step = pool_.step(arguments.at("id").get<uint64_t>(), arguments.at("action").get<std::string>());
    ToolResult result;
    result.error = step.error;
    if (step.timeout) result.stop = "tool_timeout";
    nlohmann::json messages = nlohmann::json::array();
    for (const EnvironmentMessage& m : step.messages) {
      messages.push_back({{"role", m.role}, {"content", m.content}});
      result.observation += m.content;
    }
    result.details = {{"reward", step.reward}, {"done", step.done}, {"messages", std::move(messages)}};
    return result;
  }

 private:
  EnvironmentPool& pool_;
};

}  // namespace

MultiTurnRollout::MultiTurnRollout(RolloutEngine& engine, const TurnRenderer& renderer, ToolCallParser& parser,
                                   ToolRunner& tools, const MultiTurnOptions& options, Detokenizer decode)
    : engine_(engine), renderer_(renderer), parser_(parser), tools_(tools), options_(options), decode_(std::move(decode)) {
  TANDEM_CHECK(options.max_turns >= 1, "rollout.multi_turn.max_turns must be >= 1, got {}", options.max_turns);
  TANDEM_CHECK(options.max_total_tokens >= 1, "rollout.multi_turn.max_total_tokens must be >= 1, got {}",
               options.max_total_tokens);
  TANDEM_CHECK(options.max_new_tokens >= 1, "max_new_tokens must be >= 1, got {}", options.max_new_tokens);
}

std::vector<Trajectory> MultiTurnRollout::run(const std::vector<GenerationRequest>& requests,
                                              const EnvironmentBinding* environment) {
  TANDEM_CHECK(!engine_.has_unfinished() && open_.empty(), "a multi-turn rollout needs an idle engine");
  environment_ = environment;
  environment_step_.reset();
  if (environment) {
    TANDEM_CHECK(environment->pool, "an environment binding without its pool");
    environment_step_ = std::make_shared<EnvironmentStepTool>(*environment->pool);
  }
  std::map<uint64_t, int64_t> order;
  const std::vector<int32_t> call_ends = parser_.stop_tokens();
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerationRequest r = requests[i];
    TANDEM_CHECK(order.emplace(r.id, static_cast<int64_t>(i)).second, "request id {} appears twice", r.id);
    r.keep_session = true;
    r.max_new_tokens = std::min(options_.max_new_tokens, options_.max_total_tokens);
    r.stop_token_ids.insert(r.stop_token_ids.end(), call_ends.begin(), call_ends.end());
    engine_.add_request(r);
  }
  const EngineStats before = engine_.stats();
  int64_t first_turns_left = 0;
  for (const GenerationRequest& r : requests) first_turns_left += r.n;
  done_.clear();
  while (first_turns_left > 0 || !open_.empty()) {
    for (const ToolOutcome& outcome : tools_.take_ready()) on_outcome(outcome);
    if (options_.lockstep && !engine_.has_unfinished() && waiting_tool_.empty()) release_held();
    if (engine_.has_unfinished()) {
      for (const GeneratedSample& turn : engine_.step()) {
        if (turn.turn == 0) {
          Open& open = open_[turn.session];
          open.session = turn.session;
          open.trajectory.request_id = turn.request_id;
          open.trajectory.sample_index = turn.sample_index;
          if (environment_) open.environment = environment_->instances.at({turn.request_id, turn.sample_index});
          --first_turns_left;
        }
        on_turn(turn);
      }
      stats_.kv_pinned_blocks_max = std::max(stats_.kv_pinned_blocks_max, engine_.stats().kv_blocks_pinned);
    } else if (!waiting_tool_.empty()) {
      trace::Span span("tool_wait", "generate");
      for (const ToolOutcome& outcome : tools_.wait_any(std::chrono::milliseconds(200))) on_outcome(outcome);
    } else if (first_turns_left > 0 || !open_.empty()) {  // (an outcome taken above may have ended the last)
      TANDEM_CHECK(options_.lockstep && !held_.empty(),
                   "multi-turn rollout: {} trajectories open and {} first turns to come, nothing to run",
                   open_.size(), first_turns_left);
    }
    if (options_.after_step) options_.after_step();
  }
  stats_.evicted_sessions += engine_.stats().sessions_evicted - before.sessions_evicted;
  stats_.session_tokens_reused += engine_.stats().session_tokens_reused - before.session_tokens_reused;
  std::vector<Trajectory> out = std::move(done_);
  done_.clear();
  std::stable_sort(out.begin(), out.end(), [&](const Trajectory& a, const Trajectory& b) {
    const int64_t oa = order.at(a.request_id), ob = order.at(b.request_id);
    return oa != ob ? oa < ob : a.sample_index < b.sample_index;
  });
  return out;
}

void MultiTurnRollout::on_turn(const GeneratedSample& turn) {
  Open& open = open_.at(turn.session);
  Trajectory& t = open.trajectory;
  const int32_t turn_index = static_cast<int32_t>(t.model_turns);
  TrajectoryMessage message;
  message.role = "assistant";
  message.content = decode_ ? decode_(turn.tokens) : std::string();
  message.begin = static_cast<int64_t>(t.tokens.size());
  message.turn = turn_index;
  for (size_t i = 0; i < turn.tokens.size(); ++i) {
    t.tokens.push_back(turn.tokens[i]);
    t.logprobs.push_back(turn.logprobs[i]);
    t.token_versions.push_back(turn.token_versions[i]);
    t.kinds.push_back(TokenKind::policy);
    t.turns.push_back(turn_index);
  }
  message.end = static_cast<int64_t>(t.tokens.size());
  t.messages.push_back(std::move(message));
  ++t.model_turns;
  ++stats_.model_turns;
  open.last_model_token = turn.tokens.empty() ? 0 : turn.tokens.back();

  if (turn.finish_reason == FinishReason::finish_reason_length) {
    // With an environment, a turn cut at max_new_tokens is still its action (the answer,
    // cut); without one, or with the trajectory's budget spent, the trajectory ends.
    const bool budget = static_cast<int64_t>(t.tokens.size()) >= options_.max_total_tokens;
    if (budget || !open.environment) {
      end(open, budget ? StopReason::max_total_tokens : StopReason::length);
      return;
    }
  }
  parser_.reset();
  ToolCallEvent event;
  for (int32_t token : turn.tokens) {
    ToolCallEvent e = parser_.feed(token);
    if (e.kind != ToolCallEvent::Kind::none && event.kind == ToolCallEvent::Kind::none) event = std::move(e);
  }
  // Ended by end-of-sequence with a call still open: an error the model reads, not an end.
  if (event.kind == ToolCallEvent::Kind::none) event = parser_.finish();
  if (event.kind == ToolCallEvent::Kind::none) {
    if (!open.environment) {
      end(open, StopReason::eos);
      return;
    }
    ++t.environment_steps;
    ++stats_.environment_steps;
    const uint64_t ticket = tools_.submit(environment_step_, {{"id", *open.environment}, {"action", t.messages.back().content}});
    environment_tickets_.insert(ticket);
    waiting_tool_[ticket] = turn.session;
    return;
  }
  if (t.model_turns >= options_.max_turns) {
    end(open, StopReason::max_turns);
    return;
  }
  if (event.kind == ToolCallEvent::Kind::error) {
    ++t.parse_errors;
    ++stats_.parse_errors;
    TrajectoryMessage error;
    error.role = "tool";
    error.content = "Error: " + event.error;
    observe(open, {std::move(error)});
    return;
  }
  ++t.tool_calls;
  ++stats_.tool_calls;
  waiting_tool_[tools_.submit(event.call.name, event.call.arguments)] = turn.session;
}

void MultiTurnRollout::on_outcome(const ToolOutcome& outcome) {
  auto waiting = waiting_tool_.find(outcome.ticket);
  if (waiting == waiting_tool_.end()) return;
  Open& open = open_.at(waiting->second);
  waiting_tool_.erase(waiting);
  Trajectory& t = open.trajectory;
  t.tool_seconds += outcome.result.seconds;
  stats_.tool_seconds += outcome.result.seconds;
  if (environment_tickets_.erase(outcome.ticket) > 0 && !outcome.unavailable) {
    on_environment_step(open, outcome.result);
    return;
  }
  if (outcome.unavailable) {
    ++stats_.tool_unavailable;
    end(open, StopReason::tool_error);
    return;
  }
  if (outcome.result.error) {
    ++t.tool_errors;
    ++stats_.tool_errors;
  }
  if (outcome.result.stop == "tool_timeout") {
    end(open, StopReason::tool_timeout);
    return;
  }
  TrajectoryMessage message;
  message.role = "tool";
  message.name = outcome.tool;
  message.content = outcome.result.observation;
  observe(open, {std::move(message)});
}

void MultiTurnRollout::on_environment_step(Open& open, const ToolResult& result) {
  Trajectory& t = open.trajectory;
  if (result.error) {
    ++t.tool_errors;
    ++stats_.tool_errors;
  }
  if (result.stop == "tool_timeout" || result.details.is_null()) {  // null: the runner's own deadline passed
    end(open, StopReason::tool_timeout);
    return;
  }
  const double reward = result.details.value("reward", 0.0);
  t.environment_reward += reward;
  stats_.environment_reward += reward;
  // The observation is one user message (the frame the template was probed for): a list
  // of messages is joined, blank line between.
  std::vector<TrajectoryMessage> messages;
  for (const nlohmann::json& m : result.details.at("messages")) {
    if (messages.empty()) {
      messages.emplace_back();
      messages.back().role = "user";
    } else {
      messages.back().content += "\n\n";
    }
    messages.back().content += m.at("content").get<std::string>();
  }
  if (result.details.value("done", false) || messages.empty()) {
    end(open, StopReason::env_done);
    return;
  }
  if (t.model_turns >= options_.max_turns) {
    end(open, StopReason::max_turns);
    return;
  }
  observe(open, std::move(messages));
}

void MultiTurnRollout::observe(Open& open, std::vector<TrajectoryMessage> messages) {
  Trajectory& t = open.trajectory;
  const RenderedMessages rendered = renderer_.render(open.last_model_token, messages, options_.max_tool_output_tokens);
  const int64_t after = static_cast<int64_t>(t.tokens.size() + rendered.tokens.size());
  // Room for at least one more model token, or the trajectory ends here.
  if (after + 1 > options_.max_total_tokens) {
    end(open, StopReason::max_total_tokens);
    return;
  }
  const int64_t begin = static_cast<int64_t>(t.tokens.size());
  const int32_t turn = static_cast<int32_t>(t.model_turns - 1);
  for (size_t i = 0; i < rendered.tokens.size(); ++i) {
    t.tokens.push_back(rendered.tokens[i]);
    t.logprobs.push_back(0.0f);
    t.token_versions.push_back(engine_.weight_version());
    t.kinds.push_back(rendered.kinds[i]);
    t.turns.push_back(turn);
  }
  for (size_t m = 0; m < messages.size(); ++m) {
    messages[m].begin = begin + rendered.content_spans[m].first;
    messages[m].end = begin + rendered.content_spans[m].second;
    messages[m].turn = turn;
    t.messages.push_back(std::move(messages[m]));
  }
  const uint64_t session = open.session;
  const int64_t max_new = std::min(options_.max_new_tokens, options_.max_total_tokens - after);
  if (options_.lockstep) {
    held_.push_back({session, rendered.tokens, max_new});
  } else {
    engine_.continue_session(session, rendered.tokens, max_new);
  }
}

void MultiTurnRollout::release_held() {
  for (const HeldTurn& turn : held_) engine_.continue_session(turn.session, turn.tokens, turn.max_new_tokens);
  held_.clear();
}

void MultiTurnRollout::end(Open& open, StopReason reason) {
  open.trajectory.stop = reason;
  ++stats_.stops[reason];
  ++stats_.trajectories;
  const uint64_t session = open.session;
  engine_.close_session(session);
  if (open.environment) environment_->pool->close(*open.environment);
  done_.push_back(std::move(open.trajectory));
  open_.erase(session);
}

}  // namespace tandem
