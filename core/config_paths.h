// Paths in a config are relative to the file that names them: a config file's paths to
// its directory, a `--set` path to the current directory. They are stored absolute, so a
// run's resolved config.yaml works from anywhere (tandem resume in another directory).
#pragma once

#include "core/config.h"

#include <string>
#include <vector>

namespace tandem {

// The key paths that hold file paths: model.path, data.train, data.val, algorithm.plugin and
// reward.N.plugin (for the config's reward list).
std::vector<std::string> config_path_keys(const Config& config);

// Makes every relative path in `loaded` absolute: against `config_dir` when it came from
// the file (or is a default), against the current directory when a --set gave it.
// `builtin:` names and empty values stay as they are.
void resolve_config_paths(LoadedConfig& loaded, const std::string& config_dir);

}  // namespace tandem
