#include "agent/python_tool.h"

#include "core/error.h"
#include "agent/worker_process.h"
#include "core/process.h"

#include <condition_variable>
#include <mutex>
#include <optional>

namespace tandem {

namespace {

// How long a worker may take to start and import the file.
constexpr double kStartupSeconds = 120;

class PythonFunctionTool : public Tool {
 public:
  explicit PythonFunctionTool(const PythonFunctionToolOptions& options)
      : options_(options),
        binary_(options.tandem_binary.empty() ? current_executable() : options.tandem_binary),
        what_(fmt::format("tool {} ({}:{})", options.name.empty() ? options.function : options.name, options.file,
                          options.function)) {
    TANDEM_CHECK(options.workers > 0, "{}: workers must be positive", what_);
    processes_ = std::vector<WorkerProcess>(static_cast<size_t>(options.workers));
    for (size_t i = 0; i < processes_.size(); ++i) {
      nlohmann::ordered_json hello = processes_[i].start(argv(), options_.log_path, kStartupSeconds, what_);
      if (!hello.contains("schema")) throw Error(fmt::format("{}: the tool worker's ready line has no schema", what_));
      if (i == 0) schema_ = hello["schema"];
      idle_.push_back(i);
    }
    if (options.parameters.is_object() && !options.parameters.empty()) schema_["function"]["parameters"] = options.parameters;
    if (!options.description.empty()) schema_["function"]["description"] = options.description;
  }

  std::string name() const override { return schema_["function"]["name"].get<std::string>(); }
  nlohmann::ordered_json schema() const override { return schema_; }

  ToolResult call(const nlohmann::json& arguments) override {
    size_t slot = take_idle();
    WorkerProcess& p = processes_[slot];
    ToolResult result;
    try {
      if (!p.send({{"arguments", arguments}})) throw ToolUnavailable(fmt::format("{}: the tool's worker process is gone", what_));
      const std::optional<std::string> reply = p.read_line(deadline_in(options_.timeout_s), what_);
      if (!reply) {
        replace(p);
        result.error = true;
        result.stop = "tool_timeout";
        result.observation = fmt::format("Error: the tool did not answer within {} s", options_.timeout_s);
      } else {
        const nlohmann::json answer = nlohmann::json::parse(*reply, nullptr, false);
        if (answer.is_object() && answer.contains("output")) {
          result.observation = answer["output"].get<std::string>();
        } else if (answer.is_object() && answer.contains("error")) {
          result.error = true;
          result.observation = "Error: " + answer["error"].get<std::string>();
        } else {  // the catch below replaces the worker
          throw ToolUnavailable(fmt::format("{}: the tool's worker sent an unreadable answer: {}", what_, reply->substr(0, 200)));
        }
      }
    } catch (const ToolUnavailable&) {
      replace(p);
      give_back(slot);
      throw;
    }
    give_back(slot);
    return result;
  }

 private:
  std::vector<std::string> argv() const {
    std::vector<std::string> argv = {binary_, "tool-worker", "--file", options_.file, "--function", options_.function};
    if (!options_.name.empty()) argv.insert(argv.end(), {"--name", options_.name});
    for (const std::string& directory : options_.search_path) argv.insert(argv.end(), {"--path", directory});
    return argv;
  }

  // Kills the worker and starts a fresh one in its place (a failed start leaves the slot
  // dead: its next call is ToolUnavailable).
  void replace(WorkerProcess& p) {
    p.kill();
    try {
      p.start(argv(), options_.log_path, kStartupSeconds, what_);
    } catch (const Error&) {
      p.kill();
    }
  }

  size_t take_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_ready_.wait(lock, [&] { return !idle_.empty(); });
    const size_t slot = idle_.back();
    idle_.pop_back();
    return slot;
  }

  void give_back(size_t slot) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      idle_.push_back(slot);
    }
    idle_ready_.notify_one();
  }

  PythonFunctionToolOptions options_;
  std::string binary_;
  std::string what_;
  nlohmann::ordered_json schema_;
  std::vector<WorkerProcess> processes_;
  std::mutex mutex_;
  std::condition_variable idle_ready_;
  std::vector<size_t> idle_;
};

}  // namespace

std::shared_ptr<Tool> make_python_function_tool(const PythonFunctionToolOptions& options) {
  return std::make_shared<PythonFunctionTool>(options);
}

}  // namespace tandem
