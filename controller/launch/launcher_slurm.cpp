#include "controller/launch/launcher_slurm.h"

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process.h"

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>

namespace tandem {
namespace {

constexpr double kClientTimeout_s = 30;  // a wedged slurmctld must not wedge the run

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// "NodeAddr=10.0.0.2" out of `scontrol show node NAME -o`'s one line of KEY=VALUE fields.
std::string node_field(const std::string& line, const std::string& key) {
  std::istringstream fields(line);
  std::string field;
  while (fields >> field) {
    if (field.rfind(key + "=", 0) == 0) return field.substr(key.size() + 1);
  }
  return "";
}

bool uses_cuda(const Config& c, const WorkerId& worker) {
  const bool rollout = worker.role == "rollout" || worker.role == "colocated";
  const bool learner = worker.role == "learner" || worker.role == "colocated";
  if (worker.role == "reward_model") {  // ranks numbered over the model rewards with workers, in turn
    int64_t first = 0;
    for (const RewardConfig& r : c.reward) {
      if (r.model.empty() || r.workers == 0) continue;
      if (worker.rank < first + r.workers) return r.device == "cuda";
      first += r.workers;
    }
  }
  return (rollout && c.rollout.device == "cuda") || (learner && c.learner.device == "cuda");
}

class SlurmLauncher : public Launcher {
 public:
  SlurmLauncher(std::string binary, SlurmAllocation allocation, const Config& config)
      : binary_(std::move(binary)), allocation_(std::move(allocation)), config_(config) {}
  ~SlurmLauncher() override { stop_all(0.0); }

  int launch(const LaunchRequest& r) override {
    auto placed = node_of_.find(r.id);
    if (placed == node_of_.end()) {
      // Round robin in launch order, which is the run's worker order.
      placed = node_of_.emplace(r.id, node_of_.size() % allocation_.nodes.size()).first;
    }
    auto running = steps_.find(r.id);
    if (running != steps_.end() && running->second.running()) {
      end_step(r.id, running->second, 2.0);
    }
    const SlurmNode& node = allocation_.nodes[placed->second];
    SpawnOptions options;
    options.output_path = r.log_path;  // srun's own messages; the worker writes its log itself
    options.environment = worker_environment(r);
    ChildProcess child = ChildProcess::spawn(
        srun_argv(allocation_, node, config_, r.id, r.log_path, worker_argv(binary_, r)), options);
    log::info("started {} as a job step of Slurm job {} on {} ({}), srun pid {}", r.id.name(), allocation_.job_id,
              node.name, node.address, child.pid());
    steps_[r.id] = std::move(child);
    return 0;  // the worker's pid lives on another node: not known here
  }

  std::vector<std::pair<WorkerId, ExitStatus>> reap() override {
    std::vector<std::pair<WorkerId, ExitStatus>> ended;
    for (auto& [id, srun] : steps_) {
      const bool was_running = srun.running();
      auto status = srun.poll();
      if (was_running && status) ended.emplace_back(id, *status);
    }
    return ended;
  }

  void send_signal(const WorkerId& id, int signal) override {
    auto it = steps_.find(id);
    if (it == steps_.end() || !it->second.running()) return;
    if (signal == SIGKILL) {
      end_step(id, it->second, 1.0);
    } else {
      it->second.send_signal(signal);  // srun forwards it to the step's task
    }
  }

  void stop_all(double grace_s) override {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    for (auto& [id, srun] : steps_) {
      while (srun.running() && !srun.poll() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (srun.running()) {
        log::warn("{}'s job step did not end in time: ending it", id.name());
        end_step(id, srun, 1.0);
      }
    }
  }

 private:
  // A killed srun client would leave its step running on the node: the step is ended
  // through srun instead (SIGTERM, which srun forwards; a second one makes srun kill the
  // step), and only then is the client itself killed.
  void end_step(const WorkerId& id, ChildProcess& srun, double wait_s) {
    srun.send_signal(SIGTERM);
    if (srun.wait_for(wait_s)) return;
    srun.send_signal(SIGTERM);
    if (srun.wait_for(wait_s)) return;
    log::warn("srun of {} (pid {}) did not end on SIGTERM: killing it", id.name(), srun.pid());
    srun.kill_and_reap();
  }

  std::string binary_;
  SlurmAllocation allocation_;
  const Config& config_;
  std::map<WorkerId, size_t> node_of_;
  std::map<WorkerId, ChildProcess> steps_;
};

}  // namespace

SlurmAllocation current_slurm_allocation() {
  SlurmAllocation allocation;
  allocation.job_id = environment("SLURM_JOB_ID");
  const std::string nodelist = environment("SLURM_JOB_NODELIST");
  if (allocation.job_id.empty() || nodelist.empty()) {
    throw UsageError(
        "launcher.kind: slurm runs inside a Slurm allocation (SLURM_JOB_ID and SLURM_JOB_NODELIST are not set): "
        "submit it with `tandem submit CONFIG`, or run `tandem run` inside sbatch or salloc");
  }
  std::istringstream names(run_command({"scontrol", "show", "hostnames", nodelist}, kClientTimeout_s));
  std::string name;
  while (names >> name) {
    const std::string line = run_command({"scontrol", "show", "node", name, "-o"}, kClientTimeout_s);
    std::string address = node_field(line, "NodeAddr");
    if (address.empty()) throw Error(fmt::format("scontrol show node {}: no NodeAddr in: {}", name, line));
    allocation.nodes.push_back({name, address});
  }
  if (allocation.nodes.empty()) throw Error(fmt::format("Slurm job {}: no nodes in \"{}\"", allocation.job_id, nodelist));
  return allocation;
}

std::vector<size_t> place_workers_on_nodes(size_t workers, size_t nodes) {
  TANDEM_CHECK(nodes > 0, "no nodes to place workers on");
  std::vector<size_t> placement(workers);
  for (size_t i = 0; i < workers; ++i) placement[i] = i % nodes;
  return placement;
}

std::vector<std::string> srun_argv(const SlurmAllocation& allocation, const SlurmNode& node, const Config& c,
                                   const WorkerId& worker, const std::string& log_path,
                                   const std::vector<std::string>& worker_argv) {
  std::vector<std::string> argv = {
      "srun",
      "--jobid=" + allocation.job_id,
      "--job-name=" + worker.name(),
      "--nodes=1",
      "--ntasks=1",
      "--nodelist=" + node.name,
      // Only what this step asks for, and steps may share a node's CPUs with the
      // controller and each other (workers are mostly waiting on each other).
      "--exact",
      "--overlap",
      // A failed step is our dead worker, not the job's end: the controller restarts it.
      "--kill-on-bad-exit=0",
      "--output=" + log_path,
      "--open-mode=append",
      "--quiet",
  };
  if (c.launcher.slurm.cpus_per_task > 0) argv.push_back(fmt::format("--cpus-per-task={}", c.launcher.slurm.cpus_per_task));
  if (uses_cuda(c, worker)) argv.push_back("--gpus=1");
  argv.insert(argv.end(), worker_argv.begin(), worker_argv.end());
  argv[0] = find_on_path("srun");
  if (argv[0].empty()) throw Error("launcher.kind: slurm: srun is not on PATH");
  return argv;
}

std::unique_ptr<Launcher> make_slurm_launcher(const std::string& tandem_binary, SlurmAllocation allocation,
                                              const Config& config) {
  return std::make_unique<SlurmLauncher>(tandem_binary, std::move(allocation), config);
}

}  // namespace tandem
