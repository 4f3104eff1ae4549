#include "agent/plugin_agents.h"

#include "core/error.h"

#include <cmath>
#include <map>
#include <mutex>

namespace tandem {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, PluginTool> tools;
  std::map<std::string, EnvironmentFactory> environments;
  ChatTemplateRenderer renderer;
};

Registry& registry() {
  static Registry r;
  return r;
}

template <class Map>
std::string names_of(const Map& map) {
  std::string names;
  for (const auto& [name, value] : map) names += (names.empty() ? "" : ", ") + name;
  return names.empty() ? "none" : names;
}

class PluginToolAdapter : public Tool {
 public:
  PluginToolAdapter(std::string name, PluginTool tool) : name_(std::move(name)), tool_(std::move(tool)) {
    nlohmann::ordered_json parameters = nlohmann::ordered_json::parse(tool_.parameters_json, nullptr, false);
    if (!parameters.is_object()) {
      throw Error(fmt::format("tool {}: its parameters_json is not a JSON object: {}", name_, tool_.parameters_json));
    }
    schema_ = {{"type", "function"},
               {"function", {{"name", name_}, {"description", tool_.description}, {"parameters", parameters}}}};
  }
  std::string name() const override { return name_; }
  nlohmann::ordered_json schema() const override { return schema_; }
  ToolResult call(const nlohmann::json& arguments) override {
    ToolResult result;
    try {
      result.observation = tool_.call(arguments.dump());
    } catch (const std::exception& e) {
      result.error = true;
      result.observation = std::string("Error: ") + e.what();
    }
    return result;
  }

 private:
  std::string name_;
  PluginTool tool_;
  nlohmann::ordered_json schema_;
};

class PluginEnvironmentPool : public EnvironmentPool {
 public:
  PluginEnvironmentPool(std::string name, EnvironmentFactory factory, std::string kwargs, nlohmann::json chat_template,
                        ChatTemplateRenderer renderer)
      : name_(std::move(name)), factory_(std::move(factory)), kwargs_(std::move(kwargs)),
        chat_template_(std::move(chat_template)), renderer_(std::move(renderer)) {}

  EnvironmentStart start(const nlohmann::json& row, const nlohmann::json& before) override {
    auto instance = std::make_shared<Instance>();
    EnvironmentStart out;
    try {
      instance->environment = factory_(row.dump(), kwargs_);
      if (!instance->environment) throw Error("its factory returned no instance");
      out.messages = instance->environment->reset();
    } catch (const std::exception& e) {
      throw Error(fmt::format("environment {}: making or resetting an instance failed: {}", name_, e.what()));
    }
    if (out.messages.empty()) {
      throw Error(fmt::format("environment {}: reset() returned no message: the model would have nothing to answer", name_));
    }
    nlohmann::json messages = before.is_array() ? before : nlohmann::json::array();
    for (const EnvironmentMessage& m : out.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
    try {
      out.prompt = renderer_(chat_template_, messages);
    } catch (const std::exception& e) {
      throw Error(fmt::format("environment {}: rendering reset()'s messages with the chat template failed: {}", name_,
                              e.what()));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    out.id = next_id_++;
    instances_[out.id] = std::move(instance);
    return out;
  }

  EnvironmentStep step(uint64_t id, const std::string& action) override {
    std::shared_ptr<Instance> instance = find(id);
    std::lock_guard<std::mutex> lock(instance->mutex);  // one call at a time per instance
    EnvironmentStep out;
    try {
      EnvironmentStepResult r = instance->environment->step(action);
      if (!std::isfinite(r.reward)) throw Error(fmt::format("step() returned the reward {}: rewards must be finite", r.reward));
      out.messages = std::move(r.observation);
      out.reward = r.reward;
      out.done = r.done;
    } catch (const std::exception& e) {
      out = EnvironmentStep{};
      out.error = true;
      out.messages.push_back({"user", std::string("Error: ") + e.what()});
    }
    return out;
  }

  void close(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    instances_.erase(id);
  }

 private:
  struct Instance {
    std::mutex mutex;
    std::unique_ptr<Environment> environment;
  };
  std::shared_ptr<Instance> find(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = instances_.find(id);
    if (it == instances_.end()) throw ToolUnavailable(fmt::format("environment {}: instance {} is gone", name_, id));
    return it->second;
  }

  std::string name_;
  EnvironmentFactory factory_;
  std::string kwargs_;
  nlohmann::json chat_template_;
  ChatTemplateRenderer renderer_;
  std::mutex mutex_;
  std::map<uint64_t, std::shared_ptr<Instance>> instances_;
  uint64_t next_id_ = 0;
};

}  // namespace

void register_plugin_tool(const std::string& name, PluginTool tool) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  TANDEM_CHECK(!name.empty(), "a tool needs a name");
  if (!tool.call) throw Error(fmt::format("tool \"{}\" has no call function", name));
  if (!r.tools.emplace(name, std::move(tool)).second) throw Error(fmt::format("tool \"{}\" is registered twice", name));
}

void register_plugin_environment(const std::string& name, EnvironmentFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!factory) throw Error(fmt::format("environment \"{}\" has no factory", name));
  if (!r.environments.emplace(name, std::move(factory)).second) {
    throw Error(fmt::format("environment \"{}\" is registered twice", name));
  }
}

std::shared_ptr<Tool> make_plugin_tool(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.tools.find(name);
  if (it == r.tools.end()) {
    throw Error(fmt::format("no plugin registered a tool \"{}\" (plugins' tools: {})", name, names_of(r.tools)));
  }
  return std::make_shared<PluginToolAdapter>(name, it->second);
}

void check_plugin_environment(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.environments.count(name)) {
    throw Error(fmt::format("no plugin registered an environment \"{}\" (plugins' environments: {})", name,
                            names_of(r.environments)));
  }
}

void set_chat_template_renderer(ChatTemplateRenderer renderer) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.renderer = std::move(renderer);
}

std::unique_ptr<EnvironmentPool> make_plugin_environment_pool(const std::string& name, const nlohmann::json& kwargs,
                                                              const nlohmann::json& chat_template) {
  check_plugin_environment(name);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  TANDEM_CHECK(static_cast<bool>(r.renderer), "environment {}: no chat template renderer was set in this process", name);
  return std::make_unique<PluginEnvironmentPool>(name, r.environments.at(name), kwargs.dump(), chat_template, r.renderer);
}

}  // namespace tandem
