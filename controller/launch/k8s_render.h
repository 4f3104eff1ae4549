// `tandem k8s render`: the Kubernetes objects that run one experiment.
//
//   ConfigMap  <job>-config   the fully resolved config (config_to_yaml), mounted at /etc/tandem
//   Service    <job>          headless (clusterIP: None): gives each pod of the Job a DNS name
//   Job        <job>          Indexed, 1 + workers pods; pod 0 the controller, pod i worker i
//                             (controller/launch/k8s_discovery.h); each runs
//                             `tandem k8s pod /etc/tandem/config.yaml --run-dir /run/tandem/<run>`
//
// The objects are written with yaml-cpp's emitter (never by pasting strings), all in
// launcher.kubernetes.namespace; no Namespace object (it is the cluster admin's).
#pragma once

#include "core/config.h"
#include "core/protocol.h"

#include <string>
#include <utility>
#include <vector>

namespace tandem {

// What render (and `tandem validate`, for launcher.kind: kubernetes) refuses, each as
// "ORIGIN: KEY: why": a kind other than kubernetes, no (or two) places for the run
// directory, a namespace, claim, service account or GPU resource Kubernetes would reject,
// a launcher.host (pods dial the controller's DNS name), a same-host weight_sync.method
// (shm, cuda_ipc) with rollout workers in other pods, an experiment.name that makes no
// DNS name. Empty when render can write the config.
std::vector<std::string> k8s_config_problems(const LoadedConfig& loaded, const std::vector<WorkerId>& workers);

// Things render accepts but the user should know (device: auto gets no GPU; paths that
// must exist inside the image; pods given a GPU they do not use). One line each.
std::vector<std::string> k8s_config_notes(const LoadedConfig& loaded, const std::vector<WorkerId>& workers);

struct K8sRenderOptions {
  std::string image;     // the container image holding `tandem` (and the model, data and plugins the config names)
  std::string run_name;  // the run directory, relative to the shared volume; empty: the Job's name
};

// GPUs each pod asks for: one when any worker role uses device: cuda, else none. One
// Indexed Job has one pod template, so every pod (the controller's too) asks for the same.
int64_t k8s_gpus_per_pod(const Config& config, const std::vector<WorkerId>& workers);

// The restarts the Job allows (spec.backoffLimit); see the comment in k8s_render.cpp.
int64_t k8s_backoff_limit(const Config& config, const std::vector<WorkerId>& workers);

// The rendered objects, one YAML document each, in the order to apply them.
struct K8sManifests {
  std::vector<std::pair<std::string, std::string>> files;  // file name (configmap.yaml, ...) -> one YAML document
  std::string kustomization;                              // kustomization.yaml listing the files
  std::string stream;                                     // every document in one multi-document YAML
};

// Throws ConfigError (exit 2) with k8s_config_problems when there are any.
// `workers`: training_workers(loaded.config).
K8sManifests k8s_render(const LoadedConfig& loaded, const std::vector<WorkerId>& workers, const K8sRenderOptions& options);

}  // namespace tandem
