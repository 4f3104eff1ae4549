#include "controller/run/checkpoints.h"

#include "core/checksum.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <vector>

namespace tandem {

namespace {

namespace fs = std::filesystem;

const char* const kManifest = "manifest.json";

// step_<N> directories under run_dir/checkpoints, oldest first (staging dirs like step_4.tmp excluded).
std::vector<CheckpointRef> checkpoint_dirs(const std::string& run_dir) {
  std::vector<CheckpointRef> out;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) != 0 || !entry.is_directory()) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    out.push_back({std::stoll(digits), entry.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointRef& a, const CheckpointRef& b) { return a.step < b.step; });
  return out;
}

}  // namespace

void write_checkpoint_manifest(const std::string& dir) {
  nlohmann::json files = nlohmann::json::array();
  std::vector<fs::path> paths;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().filename() != kManifest) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    files.push_back({{"path", fs::relative(p, dir).string()},
                     {"bytes", fs::file_size(p)},
                     {"checksum", checksum_hex(file_checksum64(p.string()))}});
  }
  write_file_atomic(dir + "/" + kManifest, nlohmann::json{{"files", files}}.dump(1) + "\n");
}

std::string checkpoint_problem(const std::string& dir) {
  const std::string manifest_path = dir + "/" + kManifest;
  const std::optional<std::string> text = read_file(manifest_path);
  if (!text) return manifest_path + " is missing (the checkpoint was cut off while being written)";
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(*text);
    for (const auto& f : manifest.at("files")) {
      const std::string path = dir + "/" + f.at("path").get<std::string>();
      std::error_code ec;
      const auto bytes = fs::file_size(path, ec);
      if (ec) return path + " is missing";
      if (bytes != f.at("bytes").get<uintmax_t>()) {
        return fmt::format("{} has {} bytes, the manifest says {}", path, bytes, f.at("bytes").get<uintmax_t>());
      }
      const std::string sum = checksum_hex(file_checksum64(path));
      if (sum != f.at("checksum").get<std::string>()) {
        return fmt::format("{} has checksum {}, the manifest says {}", path, sum, f.at("checksum").get<std::string>());
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("{} is malformed: {}", manifest_path, e.what());
  }
  return "";
}

std::optional<CheckpointRef> newest_whole_checkpoint(const std::string& run_dir) {
  std::vector<CheckpointRef> dirs = checkpoint_dirs(run_dir);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    const std::string problem = checkpoint_problem(it->dir);
    if (problem.empty()) return *it;
    // Set aside, not deleted (it may be worth a look), and out of the way of the step
    // that will be saved under its name again.
    std::string aside = it->dir + ".unusable";
    for (int n = 2; fs::exists(aside); ++n) aside = fmt::format("{}.unusable-{}", it->dir, n);
    fs::rename(it->dir, aside);
    log::warn("checkpoint {} is not usable ({}); moved it to {} and trying an older one", it->dir, problem, aside);
  }
  return std::nullopt;
}

void prune_checkpoints(const std::string& run_dir, int64_t keep) {
  std::vector<CheckpointRef> dirs = checkpoint_dirs(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < dirs.size(); ++i) fs::remove_all(dirs[i].dir);
}

void truncate_metrics(const std::string& path, int64_t last_step) {
  const std::optional<std::string> text = read_file(path);
  if (!text) return;
  std::istringstream lines(*text);
  std::string line, kept;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      break;  // a torn last line from a killed run: it and anything after it go
    }
    if (!row.contains("step") || !row["step"].is_number() || row["step"].get<double>() > static_cast<double>(last_step)) {
      break;
    }
    kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

}  // namespace tandem
