// Kubernetes (launcher.kind: kubernetes): who each pod of a run is and how pods find
// each other.
//
// One Indexed Job runs a whole experiment (controller/launch/k8s_render.h writes it): pod 0 is
// the controller, pod i >= 1 is the i-th worker of training_workers(config), so the Job
// has 1 + workers pods. Every pod has the hostname `<job>-<index>` and the subdomain of
// the run's headless Service, which gives it the DNS name
// `<job>-<index>.<service>.<namespace>.svc` (resolved through the pod's search domains,
// so the cluster domain need not be known). Workers dial the controller at
// tcp://<pod 0's DNS name>:<launcher.port>.
//
// Everything here is derived from the config alone: the rendered ConfigMap holds the
// fully resolved config, so `tandem k8s render` and `tandem k8s pod` in every pod agree.
// The functions take the worker list (training_workers(config), controller/loop/training_loop.h)
// as an argument: they stay pure and testable without the training loop.
#pragma once

#include "core/config.h"
#include "core/protocol.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// Where the run directory's volume is mounted in every pod, and the ConfigMap's config.
inline constexpr const char* k8s_run_volume_mount = "/run/tandem";
inline constexpr const char* k8s_config_mount = "/etc/tandem";
inline constexpr const char* k8s_config_file = "/etc/tandem/config.yaml";

// The Job's and the headless Service's name: experiment.name made a DNS-1035 label
// (lowercase letters, digits and '-', starting with a letter, ending with a letter or digit),
// short enough that every pod hostname `<name>-<index>` stays a DNS label (63 characters).
// Other characters become '-', a leading digit gets "tandem-" in front, and a long name
// is cut. Throws UsageError (naming experiment.name) when nothing usable is left.
std::string k8s_job_name(const Config& config, size_t workers);

// True when `name` is a DNS-1123 label (namespaces, pod hostnames): [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 63.
bool k8s_is_dns_label(const std::string& name);
// True when `name` is a DNS-1123 subdomain (ConfigMaps, claims, service accounts): dot-separated labels, <= 253.
bool k8s_is_dns_subdomain(const std::string& name);

// What pod `index` of the Job runs.
struct K8sPodRole {
  int64_t index = 0;
  bool controller = false;
  WorkerId worker;  // when !controller
};

// Pods of the run's Job: the controller and one per worker.
inline int64_t k8s_pod_count(const std::vector<WorkerId>& workers) { return 1 + static_cast<int64_t>(workers.size()); }

// Pod `index` (0: the controller; i >= 1: workers[i - 1]). Throws UsageError out of range.
K8sPodRole k8s_pod_role(const std::vector<WorkerId>& workers, int64_t index);

// The pod index a Job gives in JOB_COMPLETION_INDEX (`value`: the variable, nullptr when
// unset), checked against the run's pod count. Throws UsageError when it is missing, not a
// non-negative decimal integer, or out of range.
int64_t k8s_completion_index(const char* value, int64_t pods);

// Pod `index`'s hostname, `<job>-<index>`, and its DNS name `<job>-<index>.<service>.<namespace>.svc`.
std::string k8s_pod_hostname(const Config& config, const std::vector<WorkerId>& workers, int64_t index);
std::string k8s_pod_dns_name(const Config& config, const std::vector<WorkerId>& workers, int64_t index);

// The control-plane address workers dial: tcp://<pod 0's DNS name>:<launcher.port>.
std::string k8s_controller_address(const Config& config, const std::vector<WorkerId>& workers);

// The run directory inside the pods for `run_name` (a path relative to the shared volume,
// or an absolute path under the mount): /run/tandem/<run_name>. Throws UsageError for an
// empty name, "..", or an absolute path elsewhere.
std::string k8s_pod_run_dir(const std::string& run_name);

// True unless launcher.auth is none: Kubernetes traffic always leaves loopback, so auto
// means CURVE, and each worker gets a key file in RUN_DIR/keys.
bool k8s_uses_curve(const Config& config);

// The command line (after the program name) a worker pod runs:
//   worker --role ROLE --rank N --controller tcp://HOST:PORT [--keys RUN/keys/ROLE-N.key]
//          --log-file RUN/logs/ROLE-N.log --log-level L --heartbeat-interval S
//          --controller-timeout S --max-message-bytes B
// with the timeouts the local launcher gives its workers (controller/workers/worker_pool.cpp).
std::vector<std::string> k8s_worker_command(const Config& config, const std::vector<WorkerId>& workers,
                                            const WorkerId& worker, const std::string& run_dir);

}  // namespace tandem
