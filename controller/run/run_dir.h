// The run directory: config.yaml, metrics.jsonl, logs/, checkpoints/, policy/.
#pragma once

#include "core/files.h"  // write_file_atomic

#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

// The default run directory for an experiment: runs/<name>-<YYYYmmdd-HHMMSS>.
std::string default_run_dir(const std::string& experiment_name);

// Throws UsageError when `path` exists and is not an empty directory (runs are never
// overwritten; `tandem resume` continues one).
void check_run_dir_free(const std::string& path);

// Creates the directory and logs/.
void create_run_dir(const std::string& path);

// A run that trained all its steps and exported its policy says so in finished.json
// ({"steps": N}), written last. `tandem resume` reads it: a finished run is not redone.
void mark_run_finished(const std::string& run_dir, int64_t steps);
// The steps a finished run trained; nullopt while it has not finished.
std::optional<int64_t> finished_steps(const std::string& run_dir);

}  // namespace tandem
