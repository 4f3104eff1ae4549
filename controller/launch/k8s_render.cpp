#include "controller/launch/k8s_render.h"

#include "controller/launch/k8s_discovery.h"
#include "core/config_error.h"
#include "core/config_paths.h"
#include "core/error.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <regex>

namespace tandem {

namespace {

// --- small helpers over YAML::Emitter ---------------------------------------------------
// yaml-cpp writes the string "5555" or "true" plain, which reads back as a number or a
// bool; such strings (and anything not plainly a word) are written double-quoted.
bool plain_safe(const std::string& s) {
  static const std::regex word(R"([A-Za-z/][A-Za-z0-9._/=-]*)");
  if (!std::regex_match(s, word)) return false;
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  // YAML 1.1's booleans and nulls (kubectl's parser reads YAML 1.1).
  for (const char* special : {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}) {
    if (lower == special) return false;
  }
  return true;
}

void text(YAML::Emitter& out, const std::string& s) {
  if (plain_safe(s)) {
    out << s;
  } else {
    out << YAML::DoubleQuoted << s;
  }
}

void entry(YAML::Emitter& out, const std::string& key, const std::string& value) {
  out << YAML::Key << key << YAML::Value;
  text(out, value);
}
void entry(YAML::Emitter& out, const std::string& key, int64_t value) {
  out << YAML::Key << key << YAML::Value << value;
}
void entry(YAML::Emitter& out, const std::string& key, bool value) {
  out << YAML::Key << key << YAML::Value << YAML::TrueFalseBool << value;
}
void entry(YAML::Emitter& out, const std::string& key, const char* value) { entry(out, key, std::string(value)); }

using StringMap = std::vector<std::pair<std::string, std::string>>;  // in the order written

void string_map(YAML::Emitter& out, const std::string& key, const StringMap& map) {
  out << YAML::Key << key << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : map) entry(out, k, v);
  out << YAML::EndMap;
}

void string_list(YAML::Emitter& out, const std::string& key, const std::vector<std::string>& list) {
  out << YAML::Key << key << YAML::Value << YAML::BeginSeq;
  for (const std::string& item : list) text(out, item);
  out << YAML::EndSeq;
}

// --- the run's objects -----------------------------------------------------------------

struct Names {
  std::string job;        // the Job, the Service (subdomain) and the instance label
  std::string config_map;
  std::string name_space;
  StringMap labels;       // on every object and pod; the Service selects the pods by them
};

void metadata(YAML::Emitter& out, const std::string& name, const Names& names) {
  out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  entry(out, "name", name);
  entry(out, "namespace", names.name_space);
  string_map(out, "labels", names.labels);
  out << YAML::EndMap;
}

void header(YAML::Emitter& out, const char* api_version, const char* kind) {
  entry(out, "apiVersion", api_version);
  entry(out, "kind", kind);
}

void emit_config_map(YAML::Emitter& out, const Config& c, const Names& names) {
  out << YAML::BeginMap;
  header(out, "v1", "ConfigMap");
  metadata(out, names.config_map, names);
  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "config.yaml" << YAML::Value << YAML::Literal << config_to_yaml(c);
  out << YAML::EndMap;
  out << YAML::EndMap;
}

void emit_service(YAML::Emitter& out, const Config& c, const Names& names) {
  out << YAML::BeginMap;  // a comment before it would be a document of its own in yaml-cpp's stream
  out << YAML::Comment("headless: no virtual IP, a DNS record per pod of the Job (the pods' subdomain)");
  header(out, "v1", "Service");
  metadata(out, names.job, names);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  entry(out, "clusterIP", "None");
  // Workers resolve the controller's name as soon as its pod has an address, before any
  // readiness: the control plane has its own registration and heartbeats.
  entry(out, "publishNotReadyAddresses", true);
  string_map(out, "selector", names.labels);
  out << YAML::Key << "ports" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  entry(out, "name", "control");
  entry(out, "protocol", "TCP");
  entry(out, "port", c.launcher.port);
  entry(out, "targetPort", c.launcher.port);
  out << YAML::EndMap << YAML::EndSeq;
  out << YAML::EndMap;
  out << YAML::EndMap;
}

void emit_container(YAML::Emitter& out, const Config& c, const std::vector<WorkerId>& workers,
                    const K8sRenderOptions& options, const std::string& run_dir) {
  out << YAML::BeginMap;
  entry(out, "name", "tandem");
  entry(out, "image", options.image);
  string_list(out, "command", {"tandem", "k8s", "pod", k8s_config_file, "--run-dir", run_dir});
  const int64_t gpus = k8s_gpus_per_pod(c, workers);
  if (gpus == 0) {
    // CUDA base images set NVIDIA_VISIBLE_DEVICES=all; on a node whose default runtime is
    // NVIDIA's, a pod that asks for no GPU would otherwise see (and could use) them all.
    out << YAML::Key << "env" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
    entry(out, "name", "NVIDIA_VISIBLE_DEVICES");
    entry(out, "value", "void");
    out << YAML::EndMap << YAML::EndSeq;
  }
  out << YAML::Key << "ports" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  entry(out, "name", "control");
  entry(out, "containerPort", c.launcher.port);
  entry(out, "protocol", "TCP");
  out << YAML::EndMap << YAML::EndSeq;
  if (gpus > 0) {
    // An extended resource: requests must equal limits.
    out << YAML::Key << "resources" << YAML::Value << YAML::BeginMap;
    for (const char* side : {"requests", "limits"}) {
      out << YAML::Key << side << YAML::Value << YAML::BeginMap;
      entry(out, c.launcher.kubernetes.gpu_resource, gpus);
      out << YAML::EndMap;
    }
    out << YAML::EndMap;
  }
  out << YAML::Key << "volumeMounts" << YAML::Value << YAML::BeginSeq;
  for (const auto& [name, path] : StringMap{{"run-dir", k8s_run_volume_mount}, {"config", k8s_config_mount},
                                            {"dshm", "/dev/shm"}}) {
    out << YAML::BeginMap;
    entry(out, "name", name);
    entry(out, "mountPath", path);
    if (name == "config") entry(out, "readOnly", true);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
}

void emit_volumes(YAML::Emitter& out, const Config& c, const Names& names) {
  const KubernetesConfig& k = c.launcher.kubernetes;
  out << YAML::Key << "volumes" << YAML::Value << YAML::BeginSeq;
  out << YAML::BeginMap;
  entry(out, "name", "run-dir");
  if (!k.run_dir_claim.empty()) {
    out << YAML::Key << "persistentVolumeClaim" << YAML::Value << YAML::BeginMap;
    entry(out, "claimName", k.run_dir_claim);
    out << YAML::EndMap;
  } else {
    out << YAML::Key << "hostPath" << YAML::Value << YAML::BeginMap;
    entry(out, "path", k.host_path);
    entry(out, "type", "DirectoryOrCreate");
    out << YAML::EndMap;
  }
  out << YAML::EndMap;

  out << YAML::BeginMap;
  entry(out, "name", "config");
  out << YAML::Key << "configMap" << YAML::Value << YAML::BeginMap;
  entry(out, "name", names.config_map);
  out << YAML::EndMap;
  out << YAML::EndMap;

  // A container's /dev/shm is 64 MiB: too small for the shm weight transport and NCCL.
  out << YAML::BeginMap;
  entry(out, "name", "dshm");
  out << YAML::Key << "emptyDir" << YAML::Value << YAML::BeginMap;
  entry(out, "medium", "Memory");
  out << YAML::EndMap;
  out << YAML::EndMap;
  out << YAML::EndSeq;
}

void emit_job(YAML::Emitter& out, const Config& c, const std::vector<WorkerId>& workers,
              const K8sRenderOptions& options, const Names& names, const std::string& run_dir) {
  const int64_t pods = k8s_pod_count(workers);
  out << YAML::BeginMap;
  out << YAML::Comment(fmt::format("pod 0: the controller; pods 1-{}: the workers {} ... {}; pod i's hostname: {}-i",
                                   pods - 1, workers.front().name(), workers.back().name(), names.job));
  header(out, "batch/v1", "Job");
  metadata(out, names.job, names);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  entry(out, "completionMode", "Indexed");
  entry(out, "completions", pods);
  entry(out, "parallelism", pods);  // every pod at once: the controller waits for all workers to register
  out << YAML::Key << "backoffLimit" << YAML::Value << k8s_backoff_limit(c, workers)
      << YAML::Comment(fmt::format("launcher.max_restarts {} + 1 controller restart + {} workers it restarts",
                                   c.launcher.max_restarts, workers.size()));
  out << YAML::Key << "template" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  string_map(out, "labels", names.labels);
  out << YAML::EndMap;
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  entry(out, "subdomain", names.job);  // with the Job's hostnames: <job>-<index>.<service>.<namespace>.svc
  entry(out, "restartPolicy", "OnFailure");
  if (!c.launcher.kubernetes.service_account.empty()) {
    entry(out, "serviceAccountName", c.launcher.kubernetes.service_account);
  }
  out << YAML::Key << "containers" << YAML::Value << YAML::BeginSeq;
  emit_container(out, c, workers, options, run_dir);
  out << YAML::EndSeq;
  emit_volumes(out, c, names);
  out << YAML::EndMap;  // template.spec
  out << YAML::EndMap;  // template
  out << YAML::EndMap;  // spec
  out << YAML::EndMap;
}

std::string emitted(const YAML::Emitter& out) {
  TANDEM_CHECK(out.good(), fmt::format("yaml-cpp emitter: {}", out.GetLastError()));
  return std::string(out.c_str()) + "\n";
}

bool role_uses_cuda(const Config& c, const std::string& role) {
  if (role == "rollout") return c.rollout.device == "cuda";
  if (role == "learner") return c.learner.device == "cuda";
  return c.rollout.device == "cuda" || c.learner.device == "cuda";  // colocated: both roles in one process
}

// The value of a dotted key path ("reward.0.plugin") in the resolved config, or "".
std::string config_value(const YAML::Node& root, const std::string& key_path) {
  YAML::Node node = YAML::Clone(root);
  size_t start = 0;
  while (node) {
    const size_t dot = key_path.find('.', start);
    const std::string part = key_path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool index = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    node = index && node.IsSequence() ? node[std::stoul(part)] : node.IsMap() ? node[part] : YAML::Node();
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return node && node.IsScalar() ? node.as<std::string>() : "";
}

}  // namespace

int64_t k8s_gpus_per_pod(const Config& config, const std::vector<WorkerId>& workers) {
  const bool any = std::any_of(workers.begin(), workers.end(),
                               [&](const WorkerId& w) { return role_uses_cuda(config, w.role); });
  return any ? 1 : 0;
}

// Kubernetes counts every container restart in the Job's pods (restartPolicy: OnFailure)
// against spec.backoffLimit, and fails the Job, ending every pod, when the count passes
// it. The controller allows launcher.max_restarts worker restarts in one run before it
// gives up. A controller restart (the pod resumes the run from its newest checkpoint)
// also costs each worker one restart: it loses the controller and exits. So the Job allows
// the worker restarts the controller tolerates plus one controller restart with the worker
// restarts it causes. A controller that gave up exits 1 and, while the Job's count allows,
// Kubernetes restarts it too: it resumes from the newest checkpoint.
int64_t k8s_backoff_limit(const Config& config, const std::vector<WorkerId>& workers) {
  return config.launcher.max_restarts + 1 + static_cast<int64_t>(workers.size());
}

std::vector<std::string> k8s_config_problems(const LoadedConfig& loaded, const std::vector<WorkerId>& workers) {
  const Config& c = loaded.config;
  const KubernetesConfig& k = c.launcher.kubernetes;
  std::vector<std::string> problems;
  auto problem = [&](const std::string& key, const std::string& what) {
    problems.push_back(fmt::format("{}: {}: {}", loaded.origin_of(key), key, what));
  };
  if (c.launcher.kind != "kubernetes") {
    problem("launcher.kind", fmt::format("is {}; the Kubernetes objects run a config with launcher.kind: kubernetes "
                                         "(its controller waits for worker pods instead of starting workers)",
                                         c.launcher.kind));
  }
  if (c.launcher.port <= 0) {
    problem("launcher.port", "Kubernetes needs a fixed control-plane port: the Service and the workers name it");
  }
  if (!c.launcher.host.empty()) {
    problem("launcher.host", fmt::format("must be empty under Kubernetes (found \"{}\"): a pod's address is known only "
                                         "once it runs, so the controller binds every interface and workers dial its "
                                         "DNS name",
                                         c.launcher.host));
  }
  const std::string storage = "launcher.kubernetes.run_dir_claim";
  if (k.run_dir_claim.empty() && k.host_path.empty()) {
    problem(storage, "every pod needs the run directory: set run_dir_claim (a ReadWriteMany PersistentVolumeClaim) "
                     "or, on a one-node cluster, host_path");
  } else if (!k.run_dir_claim.empty() && !k.host_path.empty()) {
    problem(storage, "set run_dir_claim or host_path, not both");
  } else if (!k.run_dir_claim.empty() && !k8s_is_dns_subdomain(k.run_dir_claim)) {
    problem(storage, fmt::format("\"{}\" is not a PersistentVolumeClaim name (lowercase DNS subdomain)", k.run_dir_claim));
  } else if (!k.host_path.empty() && k.host_path.front() != '/') {
    problem("launcher.kubernetes.host_path", fmt::format("\"{}\" is not an absolute path", k.host_path));
  }
  if (!k8s_is_dns_label(k.namespace_name)) {
    problem("launcher.kubernetes.namespace",
            fmt::format("\"{}\" is not a namespace name (lowercase letters, digits and '-', at most 63)", k.namespace_name));
  }
  if (!k.service_account.empty() && !k8s_is_dns_subdomain(k.service_account)) {
    problem("launcher.kubernetes.service_account",
            fmt::format("\"{}\" is not a service account name (lowercase DNS subdomain)", k.service_account));
  }
  // An extended resource is domain/name, the domain not kubernetes.io's.
  static const std::regex resource(R"(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?))");
  std::smatch match;
  if (!std::regex_match(k.gpu_resource, match, resource) || match[1].str() == "kubernetes.io" ||
      match[5].str().size() > 63) {
    problem("launcher.kubernetes.gpu_resource",
            fmt::format("\"{}\" is not an extended resource name (domain/name, like nvidia.com/gpu)", k.gpu_resource));
  }
  // Every pod is a host of its own: no shared /dev/shm, no shared GPU.
  const std::string& method = c.weight_sync.method;
  const int64_t receivers = c.rollout.workers - (c.placement == "colocated" ? 1 : 0);  // slot 0 takes them in memory
  if ((method == "shm" || method == "cuda_ipc") && receivers > 0) {
    problem("weight_sync.method", fmt::format("{} reaches rollout workers on the same host only, and each worker is a "
                                              "pod of its own: use collective (Gloo) or nccl",
                                              method));
  }
  try {
    k8s_job_name(c, workers.size());
  } catch (const UsageError& e) {
    problems.push_back(fmt::format("{}: {}", loaded.origin_of("experiment.name"), e.what()));
  }
  return problems;
}

std::vector<std::string> k8s_config_notes(const LoadedConfig& loaded, const std::vector<WorkerId>& workers) {
  const Config& c = loaded.config;
  std::vector<std::string> notes;
  const int64_t gpus = k8s_gpus_per_pod(c, workers);
  for (const char* key : {"rollout.device", "learner.device"}) {
    const std::string& device = std::string(key) == "rollout.device" ? c.rollout.device : c.learner.device;
    if (device == "auto" && gpus == 0) {
      notes.push_back(fmt::format("{}: auto: the pods ask for a GPU only for device: cuda, so auto finds none and "
                                  "picks cpu; set {}: cuda to train on GPUs",
                                  key, key));
    }
  }
  if (gpus > 0) {
    // A role on auto finds the pod's GPU and uses it; one on cpu leaves it idle.
    auto on_cpu = [&](const std::string& role) {
      if (role == "rollout") return c.rollout.device == "cpu";
      if (role == "learner") return c.learner.device == "cpu";
      return c.rollout.device == "cpu" && c.learner.device == "cpu";
    };
    const size_t idle = static_cast<size_t>(
        std::count_if(workers.begin(), workers.end(), [&](const WorkerId& w) { return on_cpu(w.role); }));
    notes.push_back(fmt::format("every pod asks for one {} (one Job, one pod template): the controller's pod{} "
                                "hold{} one it does not use",
                                c.launcher.kubernetes.gpu_resource,
                                idle > 0 ? fmt::format(" and {} cpu worker pod{}", idle, idle == 1 ? "" : "s") : "",
                                idle > 0 ? "" : "s"));
  }
  if (c.launcher.register_timeout_s < 300) {
    notes.push_back(fmt::format("launcher.register_timeout_s: {} s for every worker pod to register; scheduling GPU "
                                "pods and pulling an image can take minutes (consider --set "
                                "launcher.register_timeout_s=600)",
                                c.launcher.register_timeout_s));
  }
  const YAML::Node resolved = YAML::Load(config_to_yaml(c));
  for (const std::string& key : config_path_keys(c)) {
    const std::string value = config_value(resolved, key);
    if (value.empty() || value.rfind("builtin:", 0) == 0) continue;
    notes.push_back(fmt::format("{}: {} must exist inside the image (or on a volume mounted there)", key, value));
  }
  return notes;
}

K8sManifests k8s_render(const LoadedConfig& loaded, const std::vector<WorkerId>& workers,
                        const K8sRenderOptions& options) {
  std::vector<std::string> problems = k8s_config_problems(loaded, workers);
  if (options.image.empty()) problems.push_back("--image: the container image must be given");
  if (!problems.empty()) throw ConfigError(problems);
  TANDEM_CHECK(!workers.empty(), "a run has at least one worker");
  const Config& c = loaded.config;

  Names names;
  names.job = k8s_job_name(c, workers.size());
  names.config_map = names.job + "-config";
  names.name_space = c.launcher.kubernetes.namespace_name;
  names.labels = {{"app.kubernetes.io/name", "tandem"}, {"app.kubernetes.io/instance", names.job}};
  const std::string run_dir = k8s_pod_run_dir(options.run_name.empty() ? names.job : options.run_name);

  K8sManifests manifests;
  YAML::Emitter stream;
  auto add = [&](const std::string& file, auto&& emit) {
    YAML::Emitter one;
    emit(one);
    manifests.files.emplace_back(file, emitted(one));
    stream << YAML::BeginDoc;
    emit(stream);
  };
  add("configmap.yaml", [&](YAML::Emitter& out) { emit_config_map(out, c, names); });
  add("service.yaml", [&](YAML::Emitter& out) { emit_service(out, c, names); });
  add("job.yaml", [&](YAML::Emitter& out) { emit_job(out, c, workers, options, names, run_dir); });
  manifests.stream = emitted(stream);

  YAML::Emitter kustomization;
  kustomization << YAML::BeginMap;
  header(kustomization, "kustomize.config.k8s.io/v1beta1", "Kustomization");
  std::vector<std::string> files;
  for (const auto& [file, document] : manifests.files) files.push_back(file);
  string_list(kustomization, "resources", files);
  kustomization << YAML::EndMap;
  manifests.kustomization = emitted(kustomization);
  return manifests;
}

}  // namespace tandem
