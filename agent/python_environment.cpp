#include "agent/python_environment.h"

#include "agent/worker_process.h"
#include "core/error.h"
#include "core/process.h"

#include <map>
#include <mutex>

namespace tandem {

namespace {

// How long a worker may take to start and import the file.
constexpr double kStartupSeconds = 120;

std::vector<EnvironmentMessage> messages_from(const nlohmann::json& list) {
  std::vector<EnvironmentMessage> out;
  for (const nlohmann::json& m : list) out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  return out;
}

class PythonEnvironmentPool : public EnvironmentPool {
 public:
  explicit PythonEnvironmentPool(const PythonEnvironmentOptions& options)
      : options_(options),
        binary_(options.tandem_binary.empty() ? current_executable() : options.tandem_binary),
        what_(fmt::format("environment {} ({})", options.class_name, options.file)) {
    TANDEM_CHECK(options.workers > 0, "{}: workers must be positive", what_);
    for (int i = 0; i < options.workers; ++i) {
      slots_.push_back(std::make_unique<Slot>());
      start_worker(*slots_.back());
    }
  }

  EnvironmentStart start(const nlohmann::json& row, const nlohmann::json& before) override {
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      id = next_id_++;
    }
    Slot& slot = *slots_[id % slots_.size()];
    std::lock_guard<std::mutex> lock(slot.mutex);
    const nlohmann::json reply = request(slot, {{"op", "start"}, {"id", id}, {"row", row}, {"before", before}}, "reset()");
    if (reply.is_null()) {
      throw ToolUnavailable(fmt::format("{}: __init__ and reset() did not return within {} s", what_, options_.timeout_s));
    }
    if (reply.contains("error")) throw Error(fmt::format("{}: {}", what_, reply["error"].get<std::string>()));
    EnvironmentStart out;
    out.id = id;
    out.messages = messages_from(reply.at("messages"));
    out.prompt = reply.at("prompt").get<std::string>();
    std::lock_guard<std::mutex> pool_lock(mutex_);
    instances_[id] = slot.generation;
    return out;
  }

  EnvironmentStep step(uint64_t id, const std::string& action) override {
    Slot& slot = *slots_[id % slots_.size()];
    std::lock_guard<std::mutex> lock(slot.mutex);
    check_alive(id, slot);
    const nlohmann::json reply = request(slot, {{"op", "step"}, {"id", id}, {"action", action}}, "step()");
    EnvironmentStep out;
    if (reply.is_null()) {
      out.timeout = true;
      out.error = true;
      out.messages.push_back({"user", fmt::format("Error: the environment did not answer within {} s", options_.timeout_s)});
      return out;
    }
    if (reply.contains("error")) {
      out.error = true;
      out.messages.push_back({"user", "Error: " + reply["error"].get<std::string>()});
      return out;
    }
    out.messages = messages_from(reply.at("messages"));
    out.reward = reply.at("reward").get<double>();
    out.done = reply.at("done").get<bool>();
    return out;
  }

  void close(uint64_t id) override {
    Slot& slot = *slots_[id % slots_.size()];
    std::lock_guard<std::mutex> lock(slot.mutex);
    std::lock_guard<std::mutex> pool_lock(mutex_);
    auto it = instances_.find(id);
    if (it == instances_.end()) return;
    if (it->second == slot.generation) slot.process.send({{"op", "close"}, {"id", id}});
    instances_.erase(it);
  }

 private:
  struct Slot {
    WorkerProcess process;
    std::mutex mutex;     // one call at a time
    uint64_t generation = 0;  // bumped when the worker is replaced: its instances are gone
  };

  void start_worker(Slot& slot) {
    std::vector<std::string> argv = {binary_, "env-worker", "--file", options_.file, "--class", options_.class_name,
                                     "--kwargs", options_.kwargs.dump()};
    for (const std::string& directory : options_.search_path) argv.insert(argv.end(), {"--path", directory});
    slot.process.start(argv, options_.log_path, kStartupSeconds, what_);
    if (!slot.process.send({{"op", "template"}, {"chat_template", options_.chat_template}})) {
      throw Error(fmt::format("{}: the worker ended after starting", what_));
    }
  }

  // Kills the slot's worker and starts a fresh one (a failed start leaves it dead: its
  // next call is ToolUnavailable).
  void replace(Slot& slot) {
    slot.process.kill();
    ++slot.generation;
    try {
      start_worker(slot);
    } catch (const Error&) {
      slot.process.kill();
    }
  }

  void check_alive(uint64_t id, const Slot& slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = instances_.find(id);
    if (it == instances_.end() || it->second != slot.generation) {
      throw ToolUnavailable(fmt::format("{}: instance {} is gone (its worker was replaced)", what_, id));
    }
  }

  // Sends `message` and reads the reply; null past the deadline (the worker is replaced).
  // The slot's lock is held.
  nlohmann::json request(Slot& slot, const nlohmann::json& message, const char* call) {
    try {
      if (!slot.process.send(message)) throw ToolUnavailable(fmt::format("{}: the worker process is gone", what_));
      const std::optional<std::string> line = slot.process.read_line(deadline_in(options_.timeout_s), what_);
      if (!line) {
        replace(slot);
        return nullptr;
      }
      nlohmann::json reply = nlohmann::json::parse(*line, nullptr, false);
      if (!reply.is_object()) {
        throw ToolUnavailable(fmt::format("{}: the worker's answer to {} is not JSON: {}", what_, call, line->substr(0, 200)));
      }
      return reply;
    } catch (const ToolUnavailable&) {
      replace(slot);
      throw;
    }
  }

  PythonEnvironmentOptions options_;
  std::string binary_;
  std::string what_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::mutex mutex_;  // instances_, next_id_
  std::map<uint64_t, uint64_t> instances_;  // id -> its slot's generation when made
  uint64_t next_id_ = 0;
};

}  // namespace

std::unique_ptr<EnvironmentPool> make_python_environment_pool(const PythonEnvironmentOptions& options) {
  return std::make_unique<PythonEnvironmentPool>(options);
}

}  // namespace tandem
