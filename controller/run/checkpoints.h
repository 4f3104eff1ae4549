// The run directory's checkpoints/step_<N>/ directories: which are whole, which is the
// newest usable one, which to delete.
//
// A checkpoint is usable only once its manifest.json exists: the controller writes it
// last (atomically), after the learners' files and controller_state.json, listing each
// file with its size and checksum (core/checksum.h). A checkpoint without a manifest was cut off
// mid-write; one whose files do not match it was damaged afterwards. Either way the
// previous checkpoint is used instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

// Records every file in `dir` (recursively, manifest.json excepted) in dir/manifest.json.
void write_checkpoint_manifest(const std::string& dir);

// Empty when `dir` matches its manifest; otherwise what is wrong (names the file).
std::string checkpoint_problem(const std::string& dir);

struct CheckpointRef {
  int64_t step = 0;
  std::string dir;
};

// The newest checkpoint under run_dir/checkpoints that matches its manifest; newer ones
// that do not are renamed step_<N>.unusable and reported with log::warn. nullopt when
// there is none.
std::optional<CheckpointRef> newest_whole_checkpoint(const std::string& run_dir);

// Deletes all but the newest `keep` step_<N> directories.
void prune_checkpoints(const std::string& run_dir, int64_t keep);

// Drops the rows of run_dir/metrics.jsonl after `last_step` (a resumed run rewrites them).
void truncate_metrics(const std::string& path, int64_t last_step);

}  // namespace tandem
