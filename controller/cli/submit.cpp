// `tandem submit CONFIG`: checks the config, writes its sbatch script into the run
// directory and submits it (controller/launch/slurm_submit.h); --dry-run prints the script.
#include "controller/cli/cli.h"
#include "controller/launch/launcher.h"
#include "controller/run/run_dir.h"
#include "controller/launch/slurm_submit.h"
#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/process.h"

#include <cstdio>
#include <filesystem>

namespace tandem {

int cli_submit(const SubmitArgs& args) {
  LoadedConfig loaded = load_config_file(args.config_path, args.overrides);
  const Config& c = loaded.config;
  if (c.launcher.kind != "slurm") {
    throw UsageError(fmt::format("{}: tandem submit runs configs with launcher.kind: slurm, and this one has {} "
                                 "(add --set launcher.kind=slurm)",
                                 loaded.origin_of("launcher.kind"), c.launcher.kind));
  }
  check_runnable(loaded);  // everything `run` checks before it starts: exit 2
  const std::string run_dir =
      std::filesystem::absolute(args.run_dir.empty() ? default_run_dir(c.experiment.name) : args.run_dir)
          .lexically_normal()
          .string();
  const SubmitPlan plan = plan_submission(c, run_dir, current_executable());
  if (args.dry_run) {
    std::fputs(plan.script.c_str(), stdout);
    return 0;
  }
  check_run_dir_free(run_dir);
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  if (error) throw Error(fmt::format("cannot create run directory {}: {}", run_dir, error.message()));
  const std::string script_path = run_dir + "/slurm-submit.sbatch";  // kept: what was submitted
  write_file_atomic(script_path, plan.script);
  const std::string job_id = parse_sbatch_job_id(run_command({"sbatch", "--parsable", script_path}, 60));
  std::fprintf(stderr, "tandem: submitted Slurm job %s; run directory %s (its output: %s/slurm-%s.out)\n",
               job_id.c_str(), run_dir.c_str(), run_dir.c_str(), job_id.c_str());
  std::printf("%s\n", job_id.c_str());
  return 0;
}

}  // namespace tandem
