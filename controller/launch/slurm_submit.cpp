#include "controller/launch/slurm_submit.h"

#include "core/config.h"
#include "core/error.h"
#include "core/text.h"

#include <cctype>
#include <sstream>

namespace tandem {
namespace {

// A Slurm job name: the experiment's name, without what #SBATCH lines cannot carry.
std::string job_name(const std::string& experiment) {
  std::string name;
  for (char c : experiment) name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '_';
  return "tandem-" + name;
}

}  // namespace

SubmitPlan plan_submission(const Config& c, const std::string& run_dir, const std::string& tandem_binary) {
  const SlurmConfig& s = c.launcher.slurm;
  SubmitPlan plan;
  plan.run_dir = run_dir;
  plan.config_yaml = config_to_yaml(c);
  std::ostringstream script;
  script << "#!/bin/bash\n"
         << "# Written by `tandem submit` for experiment " << c.experiment.name << ".\n"
         << "#SBATCH --job-name=" << job_name(c.experiment.name) << "\n"
         << "#SBATCH --nodes=" << s.nodes << "\n"
         << "#SBATCH --ntasks-per-node=1\n"
         // The controller gets SIGTERM (only the batch shell, which execs it: B:) two
         // minutes before the time limit: it checkpoints after its step and stops.
         << "#SBATCH --signal=B:TERM@120\n"
         << "#SBATCH --output=" << run_dir << "/slurm-%j.out\n";
  if (!s.partition.empty()) script << "#SBATCH --partition=" << s.partition << "\n";
  if (!s.account.empty()) script << "#SBATCH --account=" << s.account << "\n";
  if (!s.time.empty()) script << "#SBATCH --time=" << s.time << "\n";
  if (s.gpus_per_node > 0) script << "#SBATCH --gpus-per-node=" << s.gpus_per_node << "\n";
  if (s.cpus_per_task > 0) script << "#SBATCH --cpus-per-task=" << s.cpus_per_task << "\n";
  script << (s.requeue ? "#SBATCH --requeue\n" : "#SBATCH --no-requeue\n");
  std::istringstream extra(s.extra_args);
  for (std::string arg; extra >> arg;) script << "#SBATCH " << arg << "\n";
  script << "set -euo pipefail\n"
         << "run_dir=" << shell_quote(run_dir, /*always=*/true) << "\n"
         << "tandem=" << shell_quote(tandem_binary, /*always=*/true) << "\n"
         << "# A requeued job (SLURM_RESTART_COUNT > 0), or one whose run has started, resumes\n"
         << "# from the newest whole checkpoint.\n"
         << "if [ -f \"$run_dir/config.yaml\" ]; then exec \"$tandem\" resume \"$run_dir\"; fi\n"
         << "config=\"${TMPDIR:-/tmp}/tandem-${SLURM_JOB_ID}.yaml\"\n"
         << "cat > \"$config\" <<'TANDEM_CONFIG_END'\n"
         << plan.config_yaml << (plan.config_yaml.empty() || plan.config_yaml.back() == '\n' ? "" : "\n")
         << "TANDEM_CONFIG_END\n"
         << "exec \"$tandem\" run \"$config\" --run-dir \"$run_dir\"\n";
  plan.script = script.str();
  return plan;
}

std::string parse_sbatch_job_id(const std::string& output) {
  std::string line = output.substr(0, output.find('\n'));
  line = line.substr(0, line.find(';'));
  if (line.empty() || line.find_first_not_of("0123456789") != std::string::npos) {
    throw Error(fmt::format("sbatch did not print a job id; it printed: {}", output));
  }
  return line;
}

}  // namespace tandem
