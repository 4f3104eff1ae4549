// Plugins (include/tandem/plugin.h): the example plugin loads and its objectives and
// reward compute what they say (float64 references); broken libraries are clear errors
// naming the library; configs name plugin objectives.
#include "agent/plugin_agents.h"
#include "core/config.h"
#include "core/config_error.h"
#include "core/error.h"
#include "learner/objective.h"
#include "learner/objective_registry.h"
#include "plugins/plugin_loader.h"
#include "rewards/registry.h"
#include "tests/support/run_tandem.h"

#include <ATen/ATen.h>
#include <doctest/doctest.h>
#include <tandem/plugin.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace tandem;
using namespace tandem::testing;

namespace {

const std::string kExample = EXAMPLE_PLUGIN;

std::string broken(int kind) { return std::string(BROKEN_PLUGIN_PREFIX) + std::to_string(kind) + ".so"; }

}  // namespace

TEST_CASE("the example plugin registers its reward, advantage estimator and policy loss, once") {
  load_plugin(kExample);
  load_plugin(kExample);  // again: a no-op, not a "name taken" error
  const auto estimators = advantage_estimator_names();
  CHECK(std::count(estimators.begin(), estimators.end(), "group_median") == 1);
  const auto losses = policy_loss_names();
  CHECK(std::count(losses.begin(), losses.end(), "vanilla_pg") == 1);
  const auto rewards = reward_names();
  CHECK(std::count(rewards.begin(), rewards.end(), "exact_answer") == 1);
}

TEST_CASE("group_median against a float64 reference (ragged masks, ties, an all-masked row)") {
  load_plugin(kExample);
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t group = 1 + static_cast<int64_t>(rng() % 5), groups = 3, B = group * groups, T = 6;
    std::vector<double> rewards(B), mask(B * T);
    for (int64_t b = 0; b < B; ++b) {
      rewards[b] = (rng() % 3 == 0) ? 1.0 : static_cast<float>(std::normal_distribution<double>()(rng));
      const int64_t length = b == 0 ? 0 : static_cast<int64_t>(rng() % (T + 1));
      for (int64_t t = 0; t < length; ++t) mask[b * T + t] = 1;
    }
    AdvantageInputs in;
    in.rewards = at::tensor(rewards, at::kDouble).to(at::kFloat);
    in.mask = at::tensor(mask, at::kDouble).view({B, T}).to(at::kFloat);
    in.group_size = group;
    at::Tensor got = find_advantage_estimator("group_median")(in, AdvantageParams{}).advantages.to(at::kDouble);
    for (int64_t g = 0; g < B; g += group) {
      std::vector<double> sorted(rewards.begin() + g, rewards.begin() + g + group);
      std::sort(sorted.begin(), sorted.end());
      const double median = sorted[static_cast<size_t>((group - 1) / 2)];
      for (int64_t b = g; b < g + group; ++b) {
        for (int64_t t = 0; t < T; ++t) {
          const double expected = mask[b * T + t] * (static_cast<float>(rewards[b]) - median);
          const double value = got[b][t].item<double>();
          REQUIRE_FALSE(std::isnan(value));
          // One float32 subtraction of float32 values: within u·|result| (u = 2^-24).
          CHECK(std::abs(value - expected) <= 0x1p-24 * std::abs(expected));
        }
      }
    }
  }
}

TEST_CASE("vanilla_pg through the actor objective: loss and gradient against float64") {
  load_plugin(kExample);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  const int64_t B = 4, T = 5;
  std::vector<double> lp(B * T), old(B * T), adv(B * T), mask(B * T);
  double loss_sum = 0, tokens = 0;
  for (int64_t k = 0; k < B * T; ++k) {
    lp[k] = static_cast<float>(-1.0 - 0.5 * std::abs(normal(rng)));
    old[k] = static_cast<float>(lp[k] + 0.1 * normal(rng));
    adv[k] = static_cast<float>(normal(rng));
    mask[k] = (k % 7 == 3) ? 0 : 1;
    loss_sum += mask[k] * -adv[k] * lp[k];
    tokens += mask[k];
  }
  auto t = [&](const std::vector<double>& v) { return at::tensor(v, at::kDouble).view({B, T}).to(at::kFloat); };
  ActorObjectiveInputs in{t(lp).set_requires_grad(true), t(old), t(adv), t(mask), {}, {}};
  ActorObjectiveParams params;
  params.policy_loss = "vanilla_pg";
  AggregationScale scale;
  scale.tokens = tokens;
  ObjectiveResult result = actor_objective(in, params, scale);
  // A float32 sum of B·T products that may cancel, then a division: within
  // (B·T + 2)·u·Σ|terms| / tokens of the float64 mean (u = 2^-24), on any CPU.
  double abs_sum = 0;
  for (int64_t k = 0; k < B * T; ++k) abs_sum += std::abs(mask[k] * adv[k] * lp[k]);
  CHECK(std::abs(result.metrics.pg_loss - loss_sum / tokens) <= (B * T + 2) * 0x1p-24 * abs_sum / tokens);
  result.loss.backward();
  at::Tensor grad = in.logprobs.grad().to(at::kDouble);
  for (int64_t k = 0; k < B * T; ++k) {
    const double want = -adv[k] * mask[k] / tokens;  // a multiply and a divide: 2·u relative
    CHECK(std::abs(grad.view({-1})[k].item<double>() - want) <= 2 * 0x1p-24 * std::abs(want));
  }
}

TEST_CASE("exact_answer scores the trimmed response against the row's answer") {
  load_plugin(kExample);
  const RewardFn reward = find_reward("exact_answer");
  const std::vector<int32_t> ids = {1, 2};
  const std::map<std::string, std::string> row = {{"answer", "42"}};
  const std::string prompt = "6*7=", right = " 42\n", wrong = "41";
  CHECK(reward({prompt, right, ids, row}).score == 1.0);
  CHECK(reward({prompt, wrong, ids, row}).score == 0.0);
  CHECK(reward({prompt, right, ids, row}).parts.at(0).first == "exact");
  const std::map<std::string, std::string> no_answer;
  CHECK_THROWS_WITH(reward({prompt, right, ids, no_answer}), doctest::Contains("no \"answer\" field"));
}

TEST_CASE("a plugin's tool and environment: schema, calls, errors the model reads, instances") {
  load_plugin(kExample);
  std::shared_ptr<Tool> tool = make_plugin_tool("count_letters");
  CHECK(tool->schema()["function"]["name"] == "count_letters");
  CHECK(tool->schema()["function"]["parameters"]["required"][0] == "word");
  const ToolResult counted = tool->call({{"word", "hello"}});
  CHECK(counted.observation == "5");
  CHECK_FALSE(counted.error);
  const ToolResult wrong = tool->call({{"text", "hello"}});  // the plugin throws: the model reads it
  CHECK(wrong.error);
  CHECK(wrong.observation == "Error: give {\"word\": TEXT}");
  CHECK_THROWS_WITH_AS(make_plugin_tool("count_words"),
                       doctest::Contains("no plugin registered a tool \"count_words\" (plugins' tools: count_letters"),
                       Error);

  set_chat_template_renderer([](const nlohmann::json&, const nlohmann::json& messages) {
    std::string text;
    for (const nlohmann::json& m : messages) text += m["role"].get<std::string>() + ":" + m["content"].get<std::string>() + "|";
    return text;
  });
  std::unique_ptr<EnvironmentPool> pool = make_plugin_environment_pool("say_number", nlohmann::json::object(), {});
  const EnvironmentStart a = pool->start({{"number", 12}}, nlohmann::json::array({{{"role", "system"}, {"content", "Hi."}}}));
  const EnvironmentStart b = pool->start({{"number", 7}}, nlohmann::json::array());
  CHECK(a.prompt == "system:Hi.|system:Be brief.|user:Say 12.|");
  CHECK(b.prompt == "system:Be brief.|user:Say 7.|");
  EnvironmentStep s = pool->step(a.id, "7");
  CHECK_FALSE(s.done);
  CHECK(s.reward == -0.25);
  CHECK(s.messages.at(0).content == "No. Say 12.");
  s = pool->step(b.id, "7");
  CHECK(s.done);
  CHECK(s.reward == 1.0);
  pool->close(a.id);
  CHECK_THROWS_AS(pool->step(a.id, "12"), ToolUnavailable);
  CHECK_THROWS_WITH_AS(pool->start({{"other", 1}}, nlohmann::json::array()),
                       doctest::Contains("environment say_number: making or resetting an instance failed: no integer"), Error);
  CHECK_THROWS_WITH_AS(make_plugin_environment_pool("say_word", nlohmann::json::object(), {}),
                       doctest::Contains("no plugin registered an environment \"say_word\" (plugins' environments: say_number)"),
                       Error);
}

TEST_CASE("broken plugin libraries are errors naming the library and the fault") {
  CHECK_THROWS_WITH_AS(load_plugin("/nonexistent/libnothing.so"),
                       doctest::Contains("plugin /nonexistent/libnothing.so: cannot load"), Error);
  CHECK_THROWS_WITH_AS(load_plugin(broken(1)), doctest::Contains(("built for plugin API version " + std::to_string(TANDEM_PLUGIN_API_VERSION + 998)).c_str()), Error);
  CHECK_THROWS_WITH_AS(load_plugin(broken(2)),
                       doctest::Contains("its registration threw: the plugin's own config is missing"), Error);
  CHECK_THROWS_WITH_AS(load_plugin(broken(3)), doctest::Contains("named grpo is already registered"), Error);
  CHECK_THROWS_WITH_AS(load_plugin(broken(3)), doctest::Contains(("plugin " + broken(3)).c_str()), Error);
  CHECK_THROWS_WITH_AS(load_plugin(broken(4)), doctest::Contains("not a tandem plugin (no tandem_plugin_api_version"),
                       Error);
}

TEST_CASE("configs name plugin objectives; names are checked once the plugin is loaded") {
  // Without a plugin only built-ins are allowed, with a did-you-mean.
  CHECK_THROWS_WITH_AS(load_config_text("algorithm: {advantage: gpro}\n", "x.yaml"),
                       doctest::Contains("algorithm.advantage: unknown name \"gpro\" (did you mean grpo?)"),
                       ConfigError);
  const std::string with_plugin = "algorithm: {plugin: " + kExample + ", advantage: group_median, policy_loss: vanilla_pg}\n";
  const Config ok = load_config_text(with_plugin, "x.yaml").config;
  CHECK_NOTHROW(load_config_plugins(ok, "x.yaml"));
  Config typo = ok;
  typo.algorithm.policy_loss = "vanila_pg";
  CHECK_THROWS_WITH_AS(load_config_plugins(typo, "x.yaml"),
                       doctest::Contains("x.yaml: algorithm.policy_loss: unknown policy loss"), Error);
}

TEST_CASE("tandem validate loads the config's plugins: exit 2 when one cannot load") {
  TempDir dir;
  write_file_atomic(dir.path() + "/good.yaml",
                    "algorithm: {plugin: " + kExample + ", advantage: group_median}\n");
  write_file_atomic(dir.path() + "/bad.yaml", "algorithm: {plugin: " + broken(1) + ", advantage: group_median}\n");
  CHECK(run_tandem({"validate", dir.path() + "/good.yaml"}, dir.path() + "/good.out").exit_code == 0);
  CHECK(run_tandem({"validate", dir.path() + "/bad.yaml"}, dir.path() + "/bad.out").exit_code == 2);
  CHECK(read_text(dir.path() + "/bad.out").find("algorithm.plugin: plugin " + broken(1)) != std::string::npos);
}
