#include "controller/cli/cli.h"
#include "controller/run/memory_estimate.h"
#include "core/config.h"

#include <cstdio>

namespace tandem {

int cli_validate(const ValidateArgs& args) {
  LoadedConfig loaded = load_config_file(args.config_path, args.overrides);  // ConfigError: exit 2
  const RunInputs inputs = check_runnable(loaded);  // what `run` checks before it starts: exit 2
  std::fputs(config_to_yaml(loaded.config, args.explain).c_str(), stdout);
  std::fprintf(stderr, "validate: ok: %s\n", describe_run_inputs(inputs).c_str());
  const MemoryEstimate memory = estimate_memory(loaded.config, inputs.model, inputs.longest_prompt);
  std::fprintf(stderr, "validate: memory: %s\n", describe_memory(loaded.config, memory, machine_memory_bytes()).c_str());
  // Valid, but not for this machine: `run` here would refuse it (exit 2, before it starts).
  if (const std::string problem = learner_device_problem(loaded); !problem.empty()) {
    std::fprintf(stderr, "validate: note: `tandem run` on this machine refuses it: %s\n", problem.c_str());
  }
  return 0;
}

}  // namespace tandem
