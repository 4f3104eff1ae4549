#include "plugins/plugin_loader.h"

#include "agent/plugin_agents.h"
#include "core/error.h"
#include "learner/objective_registry.h"
#include "rewards/registry.h"

#include <tandem/plugin.h>

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <set>

namespace tandem {

namespace {

// What a plugin's registration calls: forwards to the registries, naming the plugin in errors.
class ForwardingRegistry final : public PluginRegistry {
 public:
  explicit ForwardingRegistry(std::string library) : library_(std::move(library)) {}

  void add_reward(const std::string& name, RewardFn fn) override {
    guarded([&] { register_reward(name, std::move(fn)); });
  }
  void add_advantage_estimator(const std::string& name, AdvantageEstimatorFn fn) override {
    guarded([&] { register_advantage_estimator(name, std::move(fn)); });
  }
  void add_policy_loss(const std::string& name, PolicyLossFn fn) override {
    guarded([&] { register_policy_loss(name, std::move(fn)); });
  }
  void add_tool(const std::string& name, PluginTool tool) override {
    guarded([&] { register_plugin_tool(name, std::move(tool)); });
  }
  void add_environment(const std::string& name, EnvironmentFactory factory) override {
    guarded([&] { register_plugin_environment(name, std::move(factory)); });
  }

 private:
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      throw Error(fmt::format("plugin {}: {}", library_, e.what()));
    }
  }
  std::string library_;
};

template <class T>
T symbol(void* handle, const char* name, const std::string& path) {
  void* found = ::dlsym(handle, name);
  if (!found) {
    throw Error(fmt::format("plugin {}: not a tandem plugin (no {}; define it with TANDEM_PLUGIN from "
                            "<tandem/plugin.h>)",
                            path, name));
  }
  return reinterpret_cast<T>(found);
}

}  // namespace

void load_plugin(const std::string& path) {
  static std::mutex mutex;
  static std::set<std::string> loaded;
  std::error_code error;
  const std::string canonical = std::filesystem::canonical(path, error).string();
  if (error) throw Error(fmt::format("plugin {}: cannot load: {}", path, error.message()));
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded.count(canonical)) return;

  // RTLD_LOCAL: two plugins may define the same internal symbols. The handle is never
  // closed: the registries hold functions whose code lives in the library.
  void* handle = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw Error(fmt::format("plugin {}: cannot load: {}", path, ::dlerror()));
  const int api = symbol<int (*)()>(handle, "tandem_plugin_api_version", path)();
  if (api != TANDEM_PLUGIN_API_VERSION) {
    throw Error(fmt::format("plugin {}: built for plugin API version {}, this tandem has version {}: rebuild it "
                            "against this tandem's include/tandem",
                            path, api, TANDEM_PLUGIN_API_VERSION));
  }
  const std::string torch = symbol<const char* (*)()>(handle, "tandem_plugin_torch_version", path)();
  if (torch != TORCH_VERSION) {
    throw Error(fmt::format("plugin {}: built against libtorch {}, this tandem uses {}: rebuild it", path, torch,
                            TORCH_VERSION));
  }
  ForwardingRegistry registry(path);
  try {
    symbol<void (*)(PluginRegistry&)>(handle, "tandem_plugin_register", path)(registry);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(fmt::format("plugin {}: its registration threw: {}", path, e.what()));
  } catch (...) {
    throw Error(fmt::format("plugin {}: its registration threw a non-standard exception", path));
  }
  loaded.insert(canonical);
}

void load_config_plugins(const Config& config, const std::function<std::string(const std::string& key)>& where) {
  auto named = [&](const std::string& key, const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}: {}", where(key), key, e.what()));
    }
  };
  if (!config.algorithm.plugin.empty()) {
    named("algorithm.plugin", [&] { load_plugin(config.algorithm.plugin); });
  }
  for (size_t i = 0; i < config.reward.size(); ++i) {
    if (!config.reward[i].plugin.empty()) {
      named(fmt::format("reward.{}.plugin", i), [&] { load_plugin(config.reward[i].plugin); });
    }
  }
  for (size_t i = 0; i < config.tools.size(); ++i) {
    if (config.tools[i].plugin.empty()) continue;
    named(fmt::format("tools.{}.plugin", i), [&] { load_plugin(config.tools[i].plugin); });
    named(fmt::format("tools.{}.name", i), [&] { make_plugin_tool(config.tools[i].name); });
  }
  if (!config.environment.plugin.empty()) {
    named("environment.plugin", [&] { load_plugin(config.environment.plugin); });
    named("environment.name", [&] { check_plugin_environment(config.environment.name); });
  }
  named("algorithm.advantage", [&] { find_advantage_estimator(config.algorithm.advantage); });
  named("algorithm.policy_loss", [&] { find_policy_loss(config.algorithm.policy_loss); });
  for (size_t i = 0; i < config.reward.size(); ++i) {
    const RewardConfig& r = config.reward[i];
    if (!r.python.empty() || !r.http.empty() || !r.model.empty()) continue;  // not a C++ reward
    named(fmt::format("reward.{}.name", i), [&] { find_reward(config.reward[i].name); });
    try {
      check_reward_config(config.reward[i], i);  // its messages name the key path
    } catch (const Error& e) {
      // Where the setting the message is about was given (a --set of it, or its file line).
      const std::string message = e.what();
      std::string key = fmt::format("reward.{}", i);
      for (const char* setting : {"pattern", "max_length"}) {
        if (message.rfind(fmt::format("reward.{}.{}:", i, setting), 0) == 0) key = fmt::format("reward.{}.{}", i, setting);
      }
      throw Error(fmt::format("{}: {}", where(key), message));
    }
  }
}

void load_config_plugins(const Config& config, const std::string& where) {
  load_config_plugins(config, [&](const std::string&) { return where; });
}

}  // namespace tandem
