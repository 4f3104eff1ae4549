// `tandem k8s render` (the objects that run a config on Kubernetes) and `tandem k8s pod`
// (the entrypoint of each pod of the rendered Job). docs/kubernetes.md says how to use them.
#include "controller/cli/cli.h"
#include "controller/launch/k8s_discovery.h"
#include "controller/launch/k8s_render.h"
#include "controller/launch/launcher.h"
#include "controller/loop/training_loop.h"
#include "core/config.h"
#include "core/config_error.h"
#include "core/error.h"
#include "core/files.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

namespace tandem {

namespace {

void print_notes(const LoadedConfig& loaded, const std::vector<WorkerId>& workers) {
  for (const std::string& note : k8s_config_notes(loaded, workers)) {
    std::fprintf(stderr, "k8s render: note: %s\n", note.c_str());
  }
}

// Workers start only once the controller has created the run directory (config.yaml is
// its first file): a worker writing its log there first would make the controller refuse
// the directory as not empty. Kubernetes starts the pods in any order.
void wait_for_run_dir(const std::string& run_dir, const std::string& who) {
  const std::string marker = run_dir + "/config.yaml";
  const auto start = std::chrono::steady_clock::now();
  auto next_message = start;
  while (!std::filesystem::exists(marker)) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_message) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
      std::fprintf(stderr, "tandem k8s pod: %s waits for the controller to create %s (%llds so far)\n", who.c_str(),
                   marker.c_str(), static_cast<long long>(waited));
      next_message = now + std::chrono::seconds(30);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

std::string shell_words(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& word : words) line += (line.empty() ? "" : " ") + word;
  return line;
}

// A restarted controller pod resumes the run in RUN_DIR; the run must be the one this Job
// was rendered for, or the pod indexes would name other workers.
void check_same_workers(const std::string& run_dir, const std::vector<WorkerId>& workers) {
  const LoadedConfig run = load_config_file(run_dir + "/config.yaml");
  const std::vector<WorkerId> run_workers = training_workers(run.config);
  if (run_workers != workers) {
    throw UsageError(fmt::format("tandem k8s pod: {} holds a run with {} workers ({}...), and this Job was rendered "
                                 "for {} ({}...): render again with another --run-dir, or from that run's config",
                                 run_dir, run_workers.size(), run_workers.empty() ? "" : run_workers[0].name(),
                                 workers.size(), workers[0].name()));
  }
}

}  // namespace

int cli_k8s_render(const K8sRenderArgs& args) {
  const LoadedConfig loaded = load_config_file(args.config_path, args.overrides);
  const std::vector<WorkerId> workers = training_workers(loaded.config);
  const K8sManifests manifests = k8s_render(loaded, workers, K8sRenderOptions{args.image, args.run_dir});
  print_notes(loaded, workers);
  if (args.out.empty()) {
    std::fputs(manifests.stream.c_str(), stdout);
    return 0;
  }
  std::error_code ec;
  std::filesystem::create_directories(args.out, ec);
  if (ec) throw Error(fmt::format("cannot create {}: {}", args.out, ec.message()));
  for (const auto& [file, document] : manifests.files) write_file_atomic(args.out + "/" + file, document);
  write_file_atomic(args.out + "/kustomization.yaml", manifests.kustomization);
  std::fprintf(stderr, "k8s render: wrote %s (apply with: kubectl apply -k %s)\n", args.out.c_str(), args.out.c_str());
  return 0;
}

int cli_k8s_pod(const K8sPodArgs& args) {
  const LoadedConfig loaded = load_config_file(args.config_path);
  const std::vector<WorkerId> workers = training_workers(loaded.config);
  if (const std::vector<std::string> problems = k8s_config_problems(loaded, workers); !problems.empty()) {
    throw ConfigError(problems);
  }
  const int64_t pods = k8s_pod_count(workers);
  const int64_t index = k8s_completion_index(std::getenv("JOB_COMPLETION_INDEX"), pods);
  const K8sPodRole role = k8s_pod_role(workers, index);

  if (role.controller) {
    const bool resume = std::filesystem::exists(args.run_dir + "/config.yaml");
    if (args.dry_run) {
      std::printf("pod %lld of %lld: controller: tandem %s\n", static_cast<long long>(index), static_cast<long long>(pods),
                  resume ? fmt::format("resume {}", args.run_dir).c_str()
                         : fmt::format("run {} --run-dir {}", args.config_path, args.run_dir).c_str());
      return 0;
    }
    if (resume) {
      check_same_workers(args.run_dir, workers);
      return cli_resume(ResumeArgs{args.run_dir, {}});
    }
    return cli_run(RunArgs{args.config_path, {}, args.run_dir});
  }

  std::vector<std::string> command = k8s_worker_command(loaded.config, workers, role.worker, args.run_dir);
  if (args.dry_run) {
    std::printf("pod %lld of %lld: worker %s: tandem %s\n", static_cast<long long>(index), static_cast<long long>(pods),
                role.worker.name().c_str(), shell_words(command).c_str());
    return 0;
  }
  wait_for_run_dir(args.run_dir, role.worker.name());
  std::error_code ec;  // the controller made logs/ before config.yaml; a run directory copied without it gets one
  std::filesystem::create_directories(args.run_dir + "/logs", ec);
  // The worker runs as `tandem worker ...` (exec, not a call): main() gives worker
  // processes their math-library environment before the libraries load
  // (core/math_environment.h), which a call from this process could no longer do.
  const std::string program = current_executable();
  command.insert(command.begin(), program);
  std::vector<char*> argv;
  for (std::string& word : command) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(program.c_str(), argv.data());
  throw Error(fmt::format("tandem k8s pod: cannot run {}: {}", program, std::strerror(errno)));
}

}  // namespace tandem
