#include "controller/run/run_dir.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

namespace tandem {

namespace fs = std::filesystem;

std::string default_run_dir(const std::string& experiment_name) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return fmt::format("runs/{}-{}", experiment_name, stamp);
}

void check_run_dir_free(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  if (fs::is_directory(path, ec)) {
    // `tandem submit` leaves its script and Slurm the job's output (slurm-*) before the run starts.
    bool only_slurm_files = true;
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      only_slurm_files = only_slurm_files && entry.path().filename().string().rfind("slurm-", 0) == 0;
    }
    if (!ec && only_slurm_files) return;
  }
  throw UsageError(fmt::format("run directory {} already exists and is not empty; pick another --run-dir "
                               "(or continue it with `tandem resume {}`)",
                               path, path));
}

void create_run_dir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(fs::path(path) / "logs", ec);
  if (ec) throw Error(fmt::format("cannot create run directory {}: {}", path, ec.message()));
}

void mark_run_finished(const std::string& run_dir, int64_t steps) {
  write_file_atomic(run_dir + "/finished.json", nlohmann::json{{"steps", steps}}.dump() + "\n");
}

std::optional<int64_t> finished_steps(const std::string& run_dir) {
  const std::string path = run_dir + "/finished.json";
  std::optional<std::string> text = read_file(path);
  if (!text) return std::nullopt;
  try {
    return nlohmann::json::parse(*text).at("steps").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not a finished-run record ({})", path, e.what()));
  }
}

}  // namespace tandem
