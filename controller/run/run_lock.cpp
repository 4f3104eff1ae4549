#include "controller/run/run_lock.h"

#include "core/error.h"
#include "core/net_address.h"  // this_hostname

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <sstream>
#include <thread>

namespace tandem {
namespace {

struct flock whole_file(short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0;
  lock.l_len = 0;  // to the end, however long the file grows
  return lock;
}

// "PID HOSTNAME\n", as the holder wrote it; {0, ""} when the file says nothing readable.
RunLockHolder read_holder(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  RunLockHolder holder;
  if (n <= 0) return holder;
  std::istringstream in(std::string(text, static_cast<size_t>(n)));
  in >> holder.pid >> holder.hostname;
  if (!in) holder.pid = 0;
  return holder;
}

}  // namespace

std::string run_lock_path(const std::string& run_dir) { return run_dir + "/controller.lock"; }

RunDirLock RunDirLock::acquire(const std::string& run_dir, const char* command) {
  const std::string path = run_lock_path(run_dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw Error(fmt::format("tandem {}: cannot open {}: {}", command, path, std::strerror(errno)));
  struct flock lock = whole_file(F_WRLCK);
  if (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    const int err = errno;
    // A holder that has just taken the lock writes its pid right after: a second at most
    // to read it, so that the refusal can name it.
    RunLockHolder holder = read_holder(fd);
    for (int tries = 0; holder.pid <= 0 && tries < 50; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      holder = read_holder(fd);
    }
    ::close(fd);
    if (err != EAGAIN && err != EACCES) {
      throw Error(fmt::format("tandem {}: cannot lock {}: {}", command, path, std::strerror(err)));
    }
    const std::string who = holder.pid > 0 ? fmt::format("pid {} on {}", holder.pid, holder.hostname)
                                           : std::string("a controller that is still starting");
    throw UsageError(fmt::format("tandem {}: the run in {} is in use by a running controller ({}); one controller "
                                 "per run directory: wait for it, stop it with `tandem stop {}`, or pick another "
                                 "--run-dir",
                                 command, run_dir, who, run_dir));
  }
  const std::string text = fmt::format("{} {}\n", ::getpid(), this_hostname());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int err = errno;
    ::close(fd);
    throw Error(fmt::format("tandem {}: cannot write {}: {}", command, path, std::strerror(err)));
  }
  return RunDirLock(fd);
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor of the description releases the lock
}

std::optional<RunLockHolder> run_lock_holder(const std::string& run_dir) {
  const int fd = ::open(run_lock_path(run_dir).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  RunLockHolder holder = read_holder(fd);
  // A read-only descriptor can test for a write lock: F_OFD_GETLK asks whether a read lock
  // would conflict, which it does exactly when someone holds the write lock.
  struct flock probe = whole_file(F_RDLCK);
  holder.held = ::fcntl(fd, F_OFD_GETLK, &probe) == 0 && probe.l_type != F_UNLCK;
  ::close(fd);
  return holder;
}

}  // namespace tandem
