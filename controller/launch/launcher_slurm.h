// launcher.kind: slurm. Inside an allocation (sbatch / salloc) the controller runs on the
// first node, and each worker is an `srun` job step on the node placement gives it; the
// srun client is this process's child, so a step that ends is a child that ends (and a
// dead step is a dead worker, restarted as any other). Node names and addresses come from
// Slurm (`scontrol show hostnames`, each node's NodeAddr), never from DNS guesses.
#pragma once

#include "controller/launch/launcher.h"

#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct Config;

struct SlurmNode {
  std::string name;     // NodeName
  std::string address;  // NodeAddr
};

struct SlurmAllocation {
  std::string job_id;
  std::vector<SlurmNode> nodes;  // in the allocation's order; the controller runs on the first
};

// The allocation this process runs in, from SLURM_JOB_ID / SLURM_JOB_NODELIST and scontrol.
// UsageError outside an allocation, naming how to get one.
SlurmAllocation current_slurm_allocation();

// Which node each worker's step runs on: round robin over the nodes in the order of
// `workers`, so ranks of a role spread over the nodes.
std::vector<size_t> place_workers_on_nodes(size_t workers, size_t nodes);

// The srun command line that starts `worker_argv` as a step of the allocation on `node`.
std::vector<std::string> srun_argv(const SlurmAllocation& allocation, const SlurmNode& node, const Config& config,
                                   const WorkerId& worker, const std::string& log_path,
                                   const std::vector<std::string>& worker_argv);

std::unique_ptr<Launcher> make_slurm_launcher(const std::string& tandem_binary, SlurmAllocation allocation,
                                              const Config& config);

}  // namespace tandem
