#include "agent/plugin_agents.h"
#include "controller/cli/cli.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "core/trace_wire.h"
#include "core/worker_runtime.h"
#include "learner/learner_role.h"
#include "plugins/plugin_loader.h"
#include "python/jinja_render.h"
#include "rollout/reward_model_role.h"
#include "rollout/rollout_role.h"

#include <unistd.h>

#include <cstdlib>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>


namespace tandem {
namespace {

// Test-only (with TANDEM_TEST_COMMANDS=1): TANDEM_TEST_SLOW_WORKER=NAME:COMMAND:SECONDS
// makes worker NAME (e.g. rollout-1) take SECONDS longer for each COMMAND, a straggler.
double test_delay_for(const std::string& worker, const std::string& command) {
  const char* slow = std::getenv("TANDEM_TEST_SLOW_WORKER");
  if (!test_commands_enabled() || !slow) return 0;
  const std::string spec = slow;
  const size_t a = spec.find(':'), b = spec.rfind(':');
  if (a == std::string::npos || a == b) return 0;
  if (spec.substr(0, a) != worker || spec.substr(a + 1, b - a - 1) != command) return 0;
  return std::atof(spec.c_str() + b + 1);
}

// Every role's commands, traced: each is a span named after it (core/trace.h), and
// `trace_collect` hands the process's spans to the controller (logging.trace_every).
CommandHandler traced(CommandHandler handler, const std::string& worker) {
  return [handler, worker](const CommandMsg& command, const std::vector<std::string>& attachments) {
    // Served here, under every role (core/worker_commands.capnp declares their replies).
    static const std::map<std::string, std::string (*)()> trace_commands = {
        {"trace_collect", &trace::collected_reply_body}, {"trace_clock", &trace::clock_reply_body}};
    if (const auto found = trace_commands.find(command.name); found != trace_commands.end()) {
      return CommandResult{found->second(), {}};
    }
    // The span's name must outlive the process's records: command names are few, so
    // each distinct one is kept once.
    static std::mutex names_mutex;
    static std::set<std::string> names;
    const char* name;
    {
      std::lock_guard<std::mutex> lock(names_mutex);
      name = names.insert(command.name).first->c_str();
    }
    trace::Span span(name, "command");
    if (const double delay = test_delay_for(worker, command.name); delay > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    }
    return handler(command, attachments);
  };
}

}  // namespace

int cli_worker(const WorkerArgs& args) {
  CommandHandler handler;
  // Plugins' environments render their prompts with the chat template in this process.
  set_chat_template_renderer(python::render_environment_prompt);
  const auto load_plugins = [](const Config& config) { load_config_plugins(config, "rollout_init config"); };
  if (args.role == "rollout") {
    handler = rollout_command_handler(load_plugins);
  } else if (args.role == "learner") {
    handler = learner_command_handler(
        [](const Config& config) { load_config_plugins(config, "learner_init config"); });
  } else if (args.role == "reward_model") {
    handler = reward_model_command_handler();
  } else if (args.role == "colocated") {
    // One process, both roles (placement: colocated): each command goes to the role whose
    // table serves it.
    const CommandHandler rollout = rollout_command_handler(load_plugins);
    const CommandHandler learner = learner_command_handler(
        [](const Config& config) { load_config_plugins(config, "learner_init config"); });
    std::map<std::string, CommandHandler> routes;
    for (const std::string& name : rollout_command_names()) routes.emplace(name, rollout);
    for (const std::string& name : learner_command_names()) routes.emplace(name, learner);
    handler = [routes](const CommandMsg& command, const std::vector<std::string>& attachments) {
      const auto found = routes.find(command.name);
      if (found == routes.end()) throw unknown_command("colocated", command.name, routes);
      return found->second(command, attachments);
    };
  } else {
    throw UsageError(
        fmt::format("--role: unknown role \"{}\" (allowed: rollout, learner, colocated, reward_model)", args.role));
  }
  WorkerOptions options;
  options.id = WorkerId{args.role, static_cast<uint32_t>(args.rank)};
  options.controller_address = args.controller;
  options.heartbeat_interval_s = args.heartbeat_interval_s;
  options.controller_timeout_s = args.controller_timeout_s;
  options.max_message_bytes = args.max_message_bytes;

  log::Options log_options;
  log_options.tag = options.id.name();
  log_options.file_level = log::parse_level(args.log_level);
  if (args.log_file.empty()) {
    log_options.console_level = log_options.file_level;
  } else {
    // The launcher points stderr at the same file: crash output lands beside the log.
    log_options.file_path = args.log_file;
    log_options.console = false;
  }
  log::init(log_options);
  log::info("worker {} starting (pid {})", options.id.name(), ::getpid());
  try {
    const char* keys_from_environment = std::getenv("TANDEM_WORKER_KEYS");
    const std::string keys_path = !args.keys_path.empty() ? args.keys_path
                                  : keys_from_environment ? keys_from_environment
                                                          : "";
    if (!keys_path.empty()) {
      options.curve = read_curve_key_file(keys_path, args.keys_wait_s);
      if (options.curve->server_public_key.empty()) {
        throw Error(fmt::format("key file {} has no server line (the controller's public key)", keys_path));
      }
    }
    return run_worker(options, traced(handler, options.id.name()));
  } catch (const std::exception& e) {
    log::error("worker failed: {}", e.what());
    return 1;
  }
}

}  // namespace tandem
