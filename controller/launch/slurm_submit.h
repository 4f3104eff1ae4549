// `tandem submit CONFIG`: the sbatch script of a run (launcher.slurm's options), submitted
// with sbatch. The script carries the fully resolved config, runs `tandem run` on the
// allocation's first node, and after a requeue `tandem resume` (which continues from the
// newest whole checkpoint).
#pragma once

#include <string>

namespace tandem {

struct Config;

struct SubmitPlan {
  std::string run_dir;       // absolute
  std::string script;        // the sbatch script
  std::string config_yaml;   // the resolved config the job runs
};

// `tandem_binary`: the absolute path the job runs (the same build on a shared file system).
SubmitPlan plan_submission(const Config& config, const std::string& run_dir, const std::string& tandem_binary);

// The job id in `sbatch --parsable`'s output ("123" or "123;cluster"); Error otherwise.
std::string parse_sbatch_job_id(const std::string& output);

}  // namespace tandem
