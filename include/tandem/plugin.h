// Public plugin API: how a shared library adds reward functions, advantage estimators,
// policy losses, tools and environments to tandem. This folder holds the only headers a plugin compiles
// against (plus libtorch's, for the objectives' tensors).
//
//   #include <tandem/plugin.h>
//
//   static void register_all(tandem::PluginRegistry& registry) {
//     registry.add_reward("my_reward", [](const tandem::RewardInput& in) { ... });
//   }
//   TANDEM_PLUGIN(register_all)
//
// Build it as a shared library (-shared -fPIC, with the same compiler and libtorch as
// tandem) and name it in the config: `reward: [{plugin: path/libmine.so, name: my_reward}]`
// or `algorithm: {plugin: path/libmine.so, advantage: my_estimator}`. tandem loads each
// library once per process at start, checks that it was built for this API version and
// libtorch, then calls its registration function. Names are global: one already taken
// (a built-in's included) is an error naming the plugin.
#pragma once

#include "agent.h"
#include "objectives.h"
#include "reward.h"

#include <torch/version.h>

#include <string>

// Bumped whenever a type in this folder changes in a way that breaks built plugins.
#define TANDEM_PLUGIN_API_VERSION 2

namespace tandem {

class PluginRegistry {
 public:
  virtual void add_reward(const std::string& name, RewardFn fn) = 0;
  virtual void add_advantage_estimator(const std::string& name, AdvantageEstimatorFn fn) = 0;
  virtual void add_policy_loss(const std::string& name, PolicyLossFn fn) = 0;
  // Multi-turn (include/tandem/agent.h): a tool the policy may call, an environment.
  virtual void add_tool(const std::string& name, PluginTool tool) = 0;
  virtual void add_environment(const std::string& name, EnvironmentFactory factory) = 0;

 protected:
  ~PluginRegistry() = default;
};

}  // namespace tandem

// Defines the three entry points tandem looks up in a plugin library.
#define TANDEM_PLUGIN(register_function)                                                         \
  extern "C" int tandem_plugin_api_version() { return TANDEM_PLUGIN_API_VERSION; }                \
  extern "C" const char* tandem_plugin_torch_version() { return TORCH_VERSION; }                  \
  extern "C" void tandem_plugin_register(::tandem::PluginRegistry& registry) { register_function(registry); }
