#include "controller/run_dir.h"

#include "core/error.h"

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
  if (fs::is_directory(path, ec) && fs::is_empty(path, ec)) return;
  throw UsageError(fmt::format("run directory {} already exists and is not empty; pick another --run-dir "
                               "(or continue it with `tandem resume {}`)",
                               path, path));
}

void create_run_dir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(fs::path(path) / "logs", ec);
  if (ec) throw Error(fmt::format("cannot create run directory {}: {}", path, ec.message()));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  std::string temporary = path + ".tmp";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("cannot write {}: {}", temporary, std::strerror(errno)));
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      throw Error(fmt::format("cannot write {}: {}", temporary, std::strerror(err)));  // e.g. the disk is full
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(temporary.c_str());
    throw Error(fmt::format("cannot write {}: {}", temporary, std::strerror(err)));
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(temporary.c_str());
    throw Error(fmt::format("cannot rename {} to {}: {}", temporary, path, std::strerror(err)));
  }
}

}  // namespace tandem
