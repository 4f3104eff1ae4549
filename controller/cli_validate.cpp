#include "controller/cli.h"
#include "core/config.h"

#include <cstdio>

namespace tandem {

int cli_validate(const ValidateArgs& args) {
  LoadedConfig loaded = load_config_file(args.config_path, args.overrides);  // ConfigError: exit 2
  const RunInputs inputs = check_runnable(loaded);  // what `run` checks before it starts: exit 2
  std::fputs(config_to_yaml(loaded.config, args.explain).c_str(), stdout);
  std::fprintf(stderr, "validate: ok: %s\n", describe_run_inputs(inputs).c_str());
  return 0;
}

}  // namespace tandem
