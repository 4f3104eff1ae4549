#include "controller/cli.h"
#include "core/config.h"
#include "core/error.h"
#include "plugins/plugin_loader.h"

#include <cstdio>

namespace tandem {

void load_plugins_or_usage_error(const LoadedConfig& loaded) {
  try {
    load_config_plugins(loaded.config, loaded.source);
  } catch (const Error& e) {
    throw UsageError(e.what());  // a plugin that cannot load is a config problem: nothing starts
  }
}

int cli_validate(const ValidateArgs& args) {
  LoadedConfig loaded = load_config_file(args.config_path, args.overrides);  // ConfigError: exit 2
  load_plugins_or_usage_error(loaded);
  std::fputs(config_to_yaml(loaded.config, args.explain).c_str(), stdout);
  return 0;
}

}  // namespace tandem
