// The run directory: config.yaml, metrics.jsonl, logs/, checkpoints/, policy/.
#pragma once

#include "core/files.h"  // write_file_atomic

#include <string>

namespace tandem {

// The default run directory for an experiment: runs/<name>-<YYYYmmdd-HHMMSS>.
std::string default_run_dir(const std::string& experiment_name);

// Throws UsageError when `path` exists and is not an empty directory (runs are never
// overwritten; `tandem resume` continues one).
void check_run_dir_free(const std::string& path);

// Creates the directory and logs/.
void create_run_dir(const std::string& path);


}  // namespace tandem
