// The multi-turn driver (agent/multi_turn.h) on the CPU engine with a random model, a
// test parser (any turn ending at one of 15 tokens is a call; its first token picks the
// tool, or makes the call malformed), tools that answer after random delays, one that
// never answers in time, one whose machinery fails, and a renderer of fixed template
// tokens around each message. Checked against things computed independently:
// - every model turn is bit-identical to a fresh request for the trajectory's whole prefix
//   (tokens, log-probs): nothing between turns was re-tokenized or lost;
// - the tokens between turns are exactly the renderer's output for the messages the
//   trajectory records, with their kinds, content spans, logprob 0;
// - budgets hold (turns, total tokens, content cut), every stop reason is the one the
//   trajectory's end implies, and the counters add up;
// - the same trajectories come out with sessions kept, with nothing kept (each turn
//   recomputed), and in lock-step; no KV block or session is left behind;
// - the learner's training module, run over prompt + trajectory, gives the engine's
//   log-probs on every policy token (within the derived float32 bound).
#include "tests/support/forward_tolerance.h"
#include "tests/support/reference_model.h"
#include "actor/policy_torch.h"
#include "agent/multi_turn.h"
#include "core/error.h"

#include <ATen/ATen.h>

#include <doctest/doctest.h>

#include <random>
#include <set>
#include <thread>

using namespace tandem;
using namespace tandem::testing;

namespace tandem {  // for doctest's messages (found by argument-dependent lookup)
std::ostream& operator<<(std::ostream& out, TokenKind kind) { return out << token_kind_name(kind); }
std::ostream& operator<<(std::ostream& out, StopReason reason) { return out << stop_reason_name(reason); }
}  // namespace tandem

namespace {

constexpr int32_t kEos = 96;
constexpr int32_t kFirstCallEnd = 10, kLastCallEnd = 24;  // a turn ending at one of these is a call

// A call's tool: from the turn's first token.
std::string tool_for(int32_t first) {
  if (first % 13 == 0) return "slow";
  if (first % 17 == 1) return "broken";
  if (first % 11 == 1) return "no_such_tool";
  return "echo";
}
bool malformed(int32_t first) { return first % 7 == 2; }

class TestParser : public ToolCallParser {
 public:
  void reset() override { tokens_.clear(); }
  ToolCallEvent feed(int32_t token) override {
    tokens_.push_back(token);
    ToolCallEvent e;
    if (token < kFirstCallEnd || token > kLastCallEnd) return e;
    if (malformed(tokens_.front())) {
      e.kind = ToolCallEvent::Kind::error;
      e.error = "tool call 1: not JSON";
      return e;
    }
    e.kind = ToolCallEvent::Kind::call;
    e.call.name = tool_for(tokens_.front());
    e.call.arguments = {{"tokens", tokens_}};
    return e;
  }
  ToolCallEvent finish() override { return {}; }
  std::vector<int32_t> stop_tokens() const override {
    std::vector<int32_t> ends;
    for (int32_t t = kFirstCallEnd; t <= kLastCallEnd; ++t) ends.push_back(t);
    return ends;
  }

 private:
  std::vector<int32_t> tokens_;
};

// What the echo tool answers: a deterministic function of the call.
std::string echo_answer(const nlohmann::json& arguments) {
  int64_t sum = 0;
  for (int32_t t : arguments.at("tokens").get<std::vector<int32_t>>()) sum += t;
  return std::string(static_cast<size_t>(sum % 9 == 0 ? 60 : 2 + sum % 15), static_cast<char>('a' + sum % 26));
}

class TestTool : public Tool {
 public:
  TestTool(std::string name, std::chrono::milliseconds max_delay) : name_(std::move(name)), max_delay_(max_delay) {}
  std::string name() const override { return name_; }
  nlohmann::ordered_json schema() const override { return {{"type", "function"}, {"function", {{"name", name_}}}}; }
  ToolResult call(const nlohmann::json& arguments) override {
    std::mt19937_64 rng(std::hash<std::string>()(arguments.dump()) ^ static_cast<uint64_t>(
                            std::chrono::steady_clock::now().time_since_epoch().count()));
    if (name_ == "broken") throw ToolUnavailable("the tool's worker died");
    if (name_ == "slow") {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return {"late", false, "", 0};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % (max_delay_.count() + 1)));
    return {echo_answer(arguments), false, "", 0};
  }

 private:
  std::string name_;
  std::chrono::milliseconds max_delay_;
};

// Fixed template tokens: [93] closes a model turn that did not end with eos, then per
// message [91] content [92], then [94] opens the next assistant turn. Content: a token
// per byte, (byte % 60) + 30.
class TestRenderer : public TurnRenderer {
 public:
  RenderedMessages render(int32_t last, const std::vector<TrajectoryMessage>& messages,
                          int64_t max_content) const override {
    RenderedMessages r;
    auto add = [&](int32_t token, TokenKind kind) {
      r.tokens.push_back(token);
      r.kinds.push_back(kind);
    };
    if (last != kEos) add(93, TokenKind::template_);
    for (const TrajectoryMessage& m : messages) {
      add(91, TokenKind::template_);
      const int64_t begin = static_cast<int64_t>(r.tokens.size());
      for (unsigned char c : m.content) {
        if (max_content >= 0 && static_cast<int64_t>(r.tokens.size()) - begin >= max_content) {
          r.truncated = true;
          break;
        }
        add(static_cast<int32_t>(c % 60) + 30, TokenKind::observation);
      }
      r.content_spans.push_back({begin, static_cast<int64_t>(r.tokens.size())});
      add(92, TokenKind::template_);
    }
    add(94, TokenKind::template_);
    return r;
  }
};

struct Setup {
  TestModel model = test_models()[0];
  ModelWeights weights;
  std::vector<GenerationRequest> requests;
  MultiTurnOptions options;
};

EngineOptions engine_options_for_test(int64_t max_pinned_blocks) {
  EngineOptions o;
  o.kv_cache_bytes = 8 << 20;
  o.block_size = 4;
  o.max_pinned_blocks = max_pinned_blocks;
  return o;
}

std::vector<Trajectory> run(const Setup& s, int64_t max_pinned_blocks, bool lockstep, MultiTurnStats* stats,
                            bool with_slow_tools) {
  RolloutEngine engine(s.model.config, s.weights, engine_options_for_test(max_pinned_blocks));
  TestRenderer renderer;
  TestParser parser;
  std::vector<std::shared_ptr<Tool>> tools = {std::make_shared<TestTool>("echo", std::chrono::milliseconds(20)),
                                              std::make_shared<TestTool>("broken", std::chrono::milliseconds(0))};
  if (with_slow_tools) tools.push_back(std::make_shared<TestTool>("slow", std::chrono::milliseconds(0)));
  ToolRunner runner(tools, 8, std::chrono::milliseconds(400));
  MultiTurnOptions options = s.options;
  options.lockstep = lockstep;
  MultiTurnRollout rollout(engine, renderer, parser, runner, options, {});
  std::vector<Trajectory> out = rollout.run(s.requests);
  *stats = rollout.stats();
  CHECK(engine.waiting_sessions() == 0);
  CHECK(engine.stats().kv_blocks_used == 0);
  CHECK(!engine.has_unfinished());
  return out;
}

}  // namespace

TEST_CASE("multi-turn: turns are token-exact continuations, budgets and stop reasons hold, modes agree") {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  INFO("seed " << seed);
  rng.seed(seed);
  Setup s;
  s.weights = random_model_weights(s.model.config, rng(), 0.3, true);
  s.options.max_turns = 4;
  s.options.max_total_tokens = 90;
  s.options.max_new_tokens = 24;
  s.options.max_tool_output_tokens = 30;
  for (uint64_t id = 0; id < 6; ++id) {
    GenerationRequest r;
    r.id = 40 + id;
    r.prompt = random_tokens(rng, 3 + static_cast<int64_t>(rng() % 8), 90);
    r.n = 1 + static_cast<int64_t>(rng() % 4);
    r.sampling.temperature = id == 0 ? 0.0 : 1.0;
    r.seed = rng();
    s.requests.push_back(r);
  }

  MultiTurnStats stats;
  const std::vector<Trajectory> got = run(s, -1, false, &stats, true);
  int64_t samples = 0;
  for (const GenerationRequest& r : s.requests) samples += r.n;
  REQUIRE(static_cast<int64_t>(got.size()) == samples);

  TestRenderer renderer;
  MultiTurnStats sum;
  size_t next = 0;
  for (const GenerationRequest& r : s.requests) {
    for (int64_t i = 0; i < r.n; ++i, ++next) {
      const Trajectory& t = got[next];
      INFO("request " << t.request_id << " sample " << t.sample_index << " stop " << stop_reason_name(t.stop));
      REQUIRE(t.request_id == r.id);
      REQUIRE(t.sample_index == i);
      const size_t n = t.tokens.size();
      REQUIRE((t.logprobs.size() == n && t.kinds.size() == n && t.turns.size() == n && t.token_versions.size() == n));
      CHECK(static_cast<int64_t>(n) <= s.options.max_total_tokens);
      CHECK(t.model_turns <= s.options.max_turns);
      sum.tool_calls += t.tool_calls;
      sum.parse_errors += t.parse_errors;
      sum.tool_errors += t.tool_errors;
      ++sum.stops[t.stop];

      // Walk the messages: assistant turns replayed on a fresh engine; what follows each
      // (tool messages up to the next assistant) re-rendered.
      int64_t turn = 0;
      for (size_t m = 0; m < t.messages.size(); ++m) {
        const TrajectoryMessage& message = t.messages[m];
        if (message.role != "assistant") continue;
        INFO("turn " << turn);
        CHECK(message.turn == turn);
        for (int64_t k = message.begin; k < message.end; ++k) {
          CHECK(t.kinds[k] == TokenKind::policy);
          CHECK(t.turns[k] == turn);
          CHECK(t.logprobs[k] <= 0.0f);
        }
        RolloutEngine fresh(s.model.config, s.weights, engine_options_for_test(-1));
        GenerationRequest whole = r;
        whole.prompt.insert(whole.prompt.end(), t.tokens.begin(), t.tokens.begin() + message.begin);
        whole.n = i + 1;
        whole.max_new_tokens = std::min(s.options.max_new_tokens, s.options.max_total_tokens - message.begin);
        whole.stop_token_ids = TestParser().stop_tokens();
        const GeneratedSample want = fresh.generate({whole})[static_cast<size_t>(i)];
        CHECK(std::vector<int32_t>(t.tokens.begin() + message.begin, t.tokens.begin() + message.end) == want.tokens);
        CHECK(std::vector<float>(t.logprobs.begin() + message.begin, t.logprobs.begin() + message.end) ==
              want.logprobs);
        // The messages that follow, up to the next assistant turn, rendered afresh.
        std::vector<TrajectoryMessage> following;
        size_t after = m + 1;
        while (after < t.messages.size() && t.messages[after].role != "assistant") following.push_back(t.messages[after++]);
        const int32_t last = message.end > message.begin ? t.tokens[message.end - 1] : 0;
        if (after < t.messages.size()) {
          REQUIRE(!following.empty());
          const RenderedMessages rendered = renderer.render(last, following, s.options.max_tool_output_tokens);
          const int64_t begin = message.end;
          REQUIRE(begin + static_cast<int64_t>(rendered.tokens.size()) == t.messages[after].begin);
          for (size_t k = 0; k < rendered.tokens.size(); ++k) {
            CHECK(t.tokens[begin + k] == rendered.tokens[k]);
            CHECK(t.kinds[begin + k] == rendered.kinds[k]);
            CHECK(t.logprobs[begin + k] == 0.0f);
            CHECK(t.turns[begin + k] == turn);
          }
          for (size_t f = 0; f < following.size(); ++f) {
            CHECK(following[f].begin == begin + rendered.content_spans[f].first);
            CHECK(following[f].end == begin + rendered.content_spans[f].second);
            CHECK(following[f].end - following[f].begin <= s.options.max_tool_output_tokens);
          }
          // Why it called: the turn ended at a call token.
          CHECK((last >= kFirstCallEnd && last <= kLastCallEnd));
        } else {
          CHECK(following.empty());  // the last assistant turn ends the trajectory
          CHECK(message.end == static_cast<int64_t>(n));
          // Its end says why the trajectory stopped.
          const bool call = last >= kFirstCallEnd && last <= kLastCallEnd;
          const int64_t length = message.end - message.begin;
          switch (t.stop) {
            case StopReason::eos: CHECK(last == kEos); break;
            case StopReason::length: CHECK(length == s.options.max_new_tokens); break;
            case StopReason::max_total_tokens: CHECK((static_cast<int64_t>(n) == s.options.max_total_tokens || call)); break;
            case StopReason::max_turns: CHECK((call && t.model_turns == s.options.max_turns)); break;
            case StopReason::tool_timeout: CHECK((call && tool_for(t.tokens[message.begin]) == "slow")); break;
            case StopReason::tool_error: CHECK((call && tool_for(t.tokens[message.begin]) == "broken")); break;
            case StopReason::env_done: FAIL("no environment here"); break;
          }
          if (t.stop == StopReason::tool_timeout || t.stop == StopReason::tool_error) {
            CHECK(!malformed(t.tokens[message.begin]));
          }
        }
        ++turn;
      }
      CHECK(turn == t.model_turns);
    }
  }
  CHECK(sum.tool_calls == stats.tool_calls);
  CHECK(sum.parse_errors == stats.parse_errors);
  CHECK(sum.tool_errors == stats.tool_errors);
  CHECK(sum.stops == stats.stops);
  CHECK(stats.trajectories == samples);
  CHECK(stats.tool_calls > 0);
  CHECK(stats.session_tokens_reused > 0);
  CHECK(stats.kv_pinned_blocks_max > 0);

  // Without the tools whose outcome depends on timing, every mode gives the same
  // trajectories: the draws are counter-based, so the order turns run in changes nothing.
  MultiTurnStats kept_stats, recomputed_stats, lockstep_stats;
  const std::vector<Trajectory> kept = run(s, -1, false, &kept_stats, false);
  const std::vector<Trajectory> recomputed = run(s, 0, false, &recomputed_stats, false);
  const std::vector<Trajectory> lockstep = run(s, -1, true, &lockstep_stats, false);
  REQUIRE(kept.size() == got.size());
  for (const auto* other : {&recomputed, &lockstep}) {
    REQUIRE(other->size() == kept.size());
    for (size_t k = 0; k < kept.size(); ++k) {
      CHECK((*other)[k].tokens == kept[k].tokens);
      CHECK((*other)[k].logprobs == kept[k].logprobs);
      CHECK((*other)[k].kinds == kept[k].kinds);
      CHECK((*other)[k].stop == kept[k].stop);
    }
  }
  CHECK(recomputed_stats.session_tokens_reused == 0);
  CHECK(kept_stats.stops == lockstep_stats.stops);
}

TEST_CASE("multi-turn: the learner's log-probs of the policy tokens equal the engine's") {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  INFO("seed " << seed);
  rng.seed(seed);
  for (const TestModel& model : test_models()) {
    INFO(model.name);
    Setup s;
    s.model = model;
    s.weights = random_model_weights(model.config, rng(), 0.15, true);
    s.options.max_turns = 3;
    s.options.max_total_tokens = 60;
    s.options.max_new_tokens = 16;
    s.options.max_tool_output_tokens = 12;
    for (uint64_t id = 0; id < 3; ++id) {
      GenerationRequest r;
      r.id = id;
      r.prompt = random_tokens(rng, 4 + static_cast<int64_t>(rng() % 6), 90);
      r.n = 2;
      r.sampling.temperature = 1.0;
      r.seed = rng();
      s.requests.push_back(r);
    }
    MultiTurnStats stats;
    const std::vector<Trajectory> trajectories = run(s, -1, false, &stats, false);
    PolicyModel learner(model.config, s.weights, at::kFloat);
    double worst = 0;
    int64_t compared = 0, observations = 0;
    for (const Trajectory& t : trajectories) {
      std::vector<int32_t> sequence = s.requests[t.request_id].prompt;
      const size_t prompt = sequence.size();
      sequence.insert(sequence.end(), t.tokens.begin(), t.tokens.end());
      TokenLayout layout = padded_layout({sequence});
      TokenLogProbs lp = token_logprobs(learner.forward(layout), layout, 1.0);
      for (size_t k = 0; k < t.tokens.size(); ++k) {
        if (t.kinds[k] != TokenKind::policy) {
          ++observations;
          continue;
        }
        const double d = std::abs(lp.logprobs[0][static_cast<int64_t>(prompt + k)].item<float>() - t.logprobs[k]);
        worst = std::isnan(d) ? INFINITY : std::max(worst, d);
        ++compared;
      }
    }
    CHECK(compared > 0);
    CHECK(observations > 0);  // policy tokens after observations were compared too
    // The float32 bound of tests/support/forward_tolerance.h (unit roundoff x each dot
    // product's and attention sum's length, from this model's weights), for the longest
    // sequence here: a prompt of <= 9 tokens + max_total_tokens.
    CHECK(worst <= logprob_agreement(model.config, s.weights, 10 + s.options.max_total_tokens, 1.0));
  }
}

TEST_CASE("tool runner: calls run concurrently, unknown tools and timeouts are answered, late results dropped") {
  std::vector<std::shared_ptr<Tool>> tools = {std::make_shared<TestTool>("echo", std::chrono::milliseconds(0)),
                                              std::make_shared<TestTool>("slow", std::chrono::milliseconds(0)),
                                              std::make_shared<TestTool>("broken", std::chrono::milliseconds(0))};
  ToolRunner runner(tools, 4, std::chrono::milliseconds(300));
  const nlohmann::json args = {{"tokens", {1, 2, 3}}};
  const auto start = std::chrono::steady_clock::now();
  const uint64_t slow1 = runner.submit("slow", args), slow2 = runner.submit("slow", args);
  const uint64_t echo = runner.submit("echo", args), missing = runner.submit("nope", args);
  const uint64_t broken = runner.submit("broken", args);
  std::map<uint64_t, ToolOutcome> outcomes;
  while (outcomes.size() < 5) {
    for (ToolOutcome& o : runner.wait_any(std::chrono::milliseconds(2000))) outcomes[o.ticket] = o;
    REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  }
  // Both slow calls ran at once and were answered at the deadline, not one after the other.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1400));
  CHECK(outcomes[slow1].result.stop == "tool_timeout");
  CHECK(outcomes[slow2].result.stop == "tool_timeout");
  CHECK(outcomes[echo].result.observation == echo_answer(args));
  CHECK(!outcomes[echo].result.error);
  CHECK(outcomes[missing].result.error);
  CHECK(outcomes[missing].result.observation.find("no tool named \"nope\"") != std::string::npos);
  CHECK(outcomes[broken].unavailable);
  CHECK(outcomes[broken].result.observation.find("worker died") != std::string::npos);
  // The slow calls' real answers, when they come, are dropped.
  std::this_thread::sleep_for(std::chrono::milliseconds(1400));
  CHECK(runner.take_ready().empty());
  CHECK(runner.in_flight() == 0);
}

namespace {

// An environment in C++: per instance, step k (from 1) answers a deterministic function
// of (instance, k, action): done when the action's text hashes to 0 mod 5 or at step 3;
// reward 0.25 * k + (length of the action % 3); an observation of one message, two
// (to be joined), or none (an end); instance 5's second step runs past its deadline.
class TestEnvironment : public EnvironmentPool {
 public:
  struct Instance {
    int64_t steps = 0;
    double reward = 0;
    bool closed = false;
    bool said_done = false;
    std::vector<std::string> observations;  // as the model should read each (joined); "" for none
  };
  EnvironmentStart start(const nlohmann::json&, const nlohmann::json&) override {
    std::lock_guard<std::mutex> lock(mutex_);
    EnvironmentStart s;
    s.id = instances_.size();
    instances_.emplace_back();
    return s;
  }
  EnvironmentStep step(uint64_t id, const std::string& action) override {
    std::lock_guard<std::mutex> lock(mutex_);
    Instance& in = instances_.at(id);
    REQUIRE(!in.closed);
    const int64_t k = ++in.steps;
    EnvironmentStep out;
    if (id == 5 && k == 2) {
      out.timeout = out.error = true;
      out.messages.push_back({"user", "Error: too slow"});
      return out;
    }
    const size_t h = std::hash<std::string>()(action + std::to_string(id) + "/" + std::to_string(k));
    out.reward = 0.25 * static_cast<double>(k) + static_cast<double>(action.size() % 3);
    in.reward += out.reward;
    out.done = h % 5 == 0 || k == 3;
    in.said_done = in.said_done || out.done;
    const std::string text = "obs" + std::to_string(id) + "." + std::to_string(k);
    if (h % 4 == 1) {
      out.messages = {{"user", text}, {"user", "more"}};
      in.observations.push_back(text + "\n\nmore");
    } else if (h % 4 != 2) {
      out.messages = {{"user", text}};
      in.observations.push_back(text);
    } else {
      in.observations.push_back("");  // none: the trajectory ends
    }
    return out;
  }
  void close(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    REQUIRE(!instances_.at(id).closed);
    instances_.at(id).closed = true;
  }
  std::vector<Instance> instances() {
    std::lock_guard<std::mutex> lock(mutex_);
    return instances_;
  }

 private:
  std::mutex mutex_;
  std::vector<Instance> instances_;
};

std::string letters(const std::vector<int32_t>& tokens) {
  std::string text;
  for (int32_t t : tokens) text += static_cast<char>('a' + t % 26);
  return text;
}

}  // namespace

TEST_CASE("multi-turn with an environment: turns are actions, rewards add up, every end has its reason") {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  INFO("seed " << seed);
  rng.seed(seed);
  Setup s;
  s.weights = random_model_weights(s.model.config, rng(), 0.3, true);
  s.options.max_turns = 3;
  s.options.max_total_tokens = 120;
  s.options.max_new_tokens = 8;  // most turns are cut here: still actions
  s.options.max_tool_output_tokens = 30;
  RolloutEngine engine(s.model.config, s.weights, engine_options_for_test(-1));
  TestRenderer renderer;
  TestParser parser;
  ToolRunner runner({std::make_shared<TestTool>("echo", std::chrono::milliseconds(5))}, 4, std::chrono::milliseconds(2000));
  TestEnvironment environment;
  EnvironmentBinding binding;
  binding.pool = &environment;
  for (uint64_t id = 0; id < 5; ++id) {
    GenerationRequest r;
    r.id = 7 + id;
    r.prompt = random_tokens(rng, 4, 90);
    r.n = 2;
    r.seed = rng();
    for (int64_t i = 0; i < r.n; ++i) binding.instances[{r.id, i}] = environment.start({}, {}).id;
    s.requests.push_back(r);
  }
  MultiTurnRollout rollout(engine, renderer, parser, runner, s.options, letters);
  const std::vector<Trajectory> got = rollout.run(s.requests, &binding);
  REQUIRE(got.size() == 10);
  const std::vector<TestEnvironment::Instance> instances = environment.instances();
  double reward_sum = 0;
  int64_t steps = 0;
  for (const Trajectory& t : got) {
    const uint64_t id = binding.instances.at({t.request_id, t.sample_index});
    const TestEnvironment::Instance& in = instances.at(id);
    INFO("instance " << id << " stop " << stop_reason_name(t.stop));
    CHECK(in.closed);
    CHECK(t.environment_steps == in.steps);
    CHECK(t.environment_reward == in.reward);  // the same additions in the same order
    reward_sum += t.environment_reward;
    steps += t.environment_steps;
    // Each environment reply is one user message, its observations joined, in order.
    std::vector<std::string> replies;
    for (const TrajectoryMessage& m : t.messages) {
      if (m.role == "user") replies.push_back(m.content);
    }
    const TrajectoryMessage& last = t.messages.back();
    switch (t.stop) {
      case StopReason::env_done:
        // The last step said done or had nothing to say; the model read every other reply.
        CHECK((in.said_done || in.observations.back().empty()));
        CHECK(replies.size() + 1 == in.observations.size());
        break;
      case StopReason::max_turns:
        CHECK(t.model_turns == s.options.max_turns);
        CHECK_FALSE(in.said_done);
        break;
      case StopReason::tool_timeout: CHECK(id == 5); break;
      case StopReason::max_total_tokens: CHECK_FALSE(in.said_done); break;
      default: FAIL("an environment trajectory ended by " << stop_reason_name(t.stop)); break;
    }
    CHECK(last.role == "assistant");
    // What the model read is what the environment said, in order.
    REQUIRE(replies.size() <= in.observations.size());
    for (size_t k = 0; k < replies.size(); ++k) CHECK(replies[k] == in.observations[k]);
  }
  CHECK(rollout.stats().environment_steps == steps);
  // Every reward is a multiple of 1/4 below 2^10: float64 sums of a few dozen of them are
  // exact in any order, so the 1e-12 relative bound is slack, not a measured figure, and
  // holds on any CPU.
  CHECK(rollout.stats().environment_reward == doctest::Approx(reward_sum).epsilon(1e-12));
  CHECK(steps > 0);
  CHECK(rollout.stats().stops.count(StopReason::env_done) > 0);  // step 3 at the latest says done
  CHECK(engine.waiting_sessions() == 0);
  CHECK(engine.stats().kv_blocks_used == 0);
}
