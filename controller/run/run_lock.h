// One controller per run directory. The controller holds an exclusive lock on
// RUN_DIR/controller.lock for its whole life; `tandem run` and `tandem resume` take it before
// they change anything in the directory, and refuse (exit 2, naming the holder's pid) while
// another controller holds it. `tandem status` and the dashboard test the lock to tell a
// live run from a dead one. The lock is an open-file-description lock (fcntl F_OFD_SETLK):
// the kernel drops it when the controller dies however it dies, it works over NFS, and a
// test of it (F_OFD_GETLK) never takes it, so an observer cannot make a starting
// controller fail.
#pragma once

#include <optional>
#include <string>

namespace tandem {

std::string run_lock_path(const std::string& run_dir);

class RunDirLock {
 public:
  // Takes the lock (creating the file), or throws UsageError naming the pid and host that
  // hold it. `command` names the refused command in the message ("run", "resume").
  static RunDirLock acquire(const std::string& run_dir, const char* command);
  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&&) = delete;
  RunDirLock(const RunDirLock&) = delete;
  ~RunDirLock();

 private:
  explicit RunDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Who holds a run directory's lock, as its file says.
struct RunLockHolder {
  bool held = false;    // a live controller holds the lock now
  int pid = 0;          // the last holder's pid (0 when the file names none)
  std::string hostname; // and host
};
// nullopt when the directory has no lock file (a run made before the lock existed).
std::optional<RunLockHolder> run_lock_holder(const std::string& run_dir);

}  // namespace tandem
