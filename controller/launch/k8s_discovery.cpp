#include "controller/launch/k8s_discovery.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace tandem {

namespace {

constexpr size_t dns_label_max = 63;

bool lower_alnum(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'); }

size_t decimal_digits(int64_t value) { return std::to_string(value).size(); }

}  // namespace

bool k8s_is_dns_label(const std::string& name) {
  if (name.empty() || name.size() > dns_label_max) return false;
  if (!lower_alnum(name.front()) || !lower_alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [](char ch) { return lower_alnum(ch) || ch == '-'; });
}

bool k8s_is_dns_subdomain(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    const std::string label = name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!k8s_is_dns_label(label)) return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

std::string k8s_job_name(const Config& config, size_t workers) {
  const std::string& experiment = config.experiment.name;
  std::string name;
  for (char ch : experiment) {
    const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower_alnum(lower)) {
      name += lower;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';  // a run of other characters becomes one '-'
    }
  }
  while (!name.empty() && name.back() == '-') name.pop_back();
  if (name.empty()) {
    throw UsageError(fmt::format(
        "experiment.name: \"{}\" has no ASCII letter or digit to make a Kubernetes name from (the Job and Service "
        "names are experiment.name as a DNS label); set experiment.name to something like \"grpo-addition\"",
        experiment));
  }
  if (name.front() >= '0' && name.front() <= '9') name = "tandem-" + name;  // a Service name starts with a letter
  // The last pod's hostname "<name>-<index>" must stay a DNS label.
  const size_t longest = dns_label_max - 1 - decimal_digits(static_cast<int64_t>(workers));
  if (name.size() > longest) name.resize(longest);
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name;
}

K8sPodRole k8s_pod_role(const std::vector<WorkerId>& workers, int64_t index) {
  const int64_t pods = k8s_pod_count(workers);
  if (index < 0 || index >= pods) {
    throw UsageError(fmt::format("pod index {} is out of range: this config runs {} pods (indexes 0-{}: the "
                                 "controller and {} workers)",
                                 index, pods, pods - 1, workers.size()));
  }
  K8sPodRole role;
  role.index = index;
  role.controller = index == 0;
  if (!role.controller) role.worker = workers[static_cast<size_t>(index - 1)];
  return role;
}

int64_t k8s_completion_index(const char* value, int64_t pods) {
  if (value == nullptr) {
    throw UsageError(
        "JOB_COMPLETION_INDEX is not set: `tandem k8s pod` is the entrypoint of the pods of the Indexed Job that "
        "`tandem k8s render` writes (Kubernetes sets the variable in every pod of a Job with completionMode: "
        "Indexed)");
  }
  const std::string text = value;
  const bool digits = !text.empty() && text.size() <= 9 &&
                      std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!digits) {
    throw UsageError(fmt::format("JOB_COMPLETION_INDEX=\"{}\" is not a pod index (a non-negative decimal integer)", text));
  }
  const int64_t index = std::stoll(text);
  if (index >= pods) {
    throw UsageError(fmt::format(
        "JOB_COMPLETION_INDEX={} is out of range: this config runs {} pods (indexes 0-{}); was the Job rendered "
        "from another config than its ConfigMap's?",
        index, pods, pods - 1));
  }
  return index;
}

std::string k8s_pod_hostname(const Config& config, const std::vector<WorkerId>& workers, int64_t index) {
  return fmt::format("{}-{}", k8s_job_name(config, workers.size()), index);
}

std::string k8s_pod_dns_name(const Config& config, const std::vector<WorkerId>& workers, int64_t index) {
  // The Service shares the Job's name (they are different kinds of object).
  const std::string service = k8s_job_name(config, workers.size());
  return fmt::format("{}.{}.{}.svc", k8s_pod_hostname(config, workers, index), service,
                     config.launcher.kubernetes.namespace_name);
}

std::string k8s_controller_address(const Config& config, const std::vector<WorkerId>& workers) {
  return fmt::format("tcp://{}:{}", k8s_pod_dns_name(config, workers, 0), config.launcher.port);
}

std::string k8s_pod_run_dir(const std::string& run_name) {
  const std::filesystem::path mount = k8s_run_volume_mount;
  std::filesystem::path path(run_name);
  if (path.is_absolute()) {
    const std::filesystem::path relative = path.lexically_normal().lexically_relative(mount);
    if (relative.empty() || *relative.begin() == "..") {
      throw UsageError(fmt::format("--run-dir {}: the run directory lives on the shared volume mounted at {}: give a "
                                   "path relative to it (or one under {})",
                                   run_name, mount.string(), mount.string()));
    }
    path = relative;
  }
  path = path.lexically_normal();
  if (run_name.empty() || path.empty() || path == "." || *path.begin() == "..") {
    throw UsageError(fmt::format("--run-dir \"{}\": expected a directory inside the shared volume (like my-run)", run_name));
  }
  std::string relative = path.generic_string();
  while (!relative.empty() && relative.back() == '/') relative.pop_back();
  return (mount / relative).generic_string();
}

bool k8s_uses_curve(const Config& config) { return config.launcher.auth != "none"; }

std::vector<std::string> k8s_worker_command(const Config& config, const std::vector<WorkerId>& workers,
                                            const WorkerId& worker, const std::string& run_dir) {
  const LauncherConfig& launcher = config.launcher;
  std::vector<std::string> command = {"worker",       "--role",
                                      worker.role,    "--rank",
                                      std::to_string(worker.rank), "--controller",
                                      k8s_controller_address(config, workers)};
  if (k8s_uses_curve(config)) {
    command.insert(command.end(), {"--keys", fmt::format("{}/keys/{}.key", run_dir, worker.name())});
  }
  // The same timeouts as the local launcher's workers (WorkerPool::launch_request).
  const double controller_timeout_s = std::max(launcher.heartbeat_timeout_s, 5.0 * launcher.heartbeat_interval_s);
  command.insert(command.end(),
                 {"--log-file", fmt::format("{}/logs/{}.log", run_dir, worker.name()), "--log-level",
                  config.logging.level, "--heartbeat-interval", fmt::format("{}", launcher.heartbeat_interval_s),
                  "--controller-timeout", fmt::format("{}", controller_timeout_s), "--max-message-bytes",
                  std::to_string(static_cast<size_t>(launcher.max_message_mb) << 20)});
  return command;
}

}  // namespace tandem
