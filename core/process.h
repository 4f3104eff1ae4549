// Child processes with RAII: a ChildProcess that goes out of scope still running is
// killed (SIGKILL) and reaped, so no exit path of the parent leaves orphans behind.
// Children also get PR_SET_PDEATHSIG=SIGKILL: if the parent is killed outright,
// the kernel ends them too.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

struct ExitStatus {
  int exit_code = -1;  // set when the process exited
  int signal = 0;      // set when a signal ended it
  // "exited with status 3" / "killed by signal 9 (SIGKILL)"
  std::string describe() const;
  bool success() const { return signal == 0 && exit_code == 0; }
};

std::string signal_name(int signal);

struct SpawnOptions {
  std::string output_path;      // stdout and stderr appended here; empty: inherit
  bool ignore_interrupt = true;  // SIGINT ignored: the parent decides how children stop
  // Pipe ends (or any descriptors) the child gets as its stdin / stdout; -1: /dev/null and
  // output_path. The parent keeps its copies (close them after spawn).
  int stdin_fd = -1;
  int stdout_fd = -1;
  // "NAME=value" entries added to (or replacing in) the child's environment.
  std::vector<std::string> environment = {};
  // Untrusted code (rewards): the child leads a process group of its own, which
  // kill_and_reap() kills whole, so what it forks does not outlive it.
  bool own_process_group = false;
  // RLIMIT_DATA in bytes (0: unlimited): the private writable memory the child may map,
  // reserved or touched; an allocation past it fails (Python: MemoryError).
  uint64_t max_data_bytes = 0;
};

// The full path of program `name` on $PATH (or `name` itself when it holds a slash);
// empty when it is not found.
std::string find_on_path(const std::string& name);

// The path of the running executable (/proc/self/exe).
std::string current_executable();

class ChildProcess {
 public:
  ChildProcess() = default;
  // argv[0] is the program path. Throws tandem::Error when fork or the output file fails;
  // a failed exec shows as exit status 127 with the reason in the output file.
  static ChildProcess spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_; }
  // Non-blocking: the exit status once the process has ended (and it is reaped).
  std::optional<ExitStatus> poll();
  // Waits up to timeout_s; returns the status if it ended by then.
  std::optional<ExitStatus> wait_for(double timeout_s);
  void send_signal(int signal);
  // SIGKILL and reap (no-op when already ended). With own_process_group, every process
  // left in the group is killed too, even after the leader ended.
  void kill_and_reap();
  // A descriptor that polls readable once the process has exited (pidfd_open; owned
  // here). -1 where the kernel has no pidfd (before Linux 5.3).
  int exit_fd();

 private:
  pid_t pid_ = -1;
  bool own_group_ = false;
  int exit_fd_ = -1;
  std::optional<ExitStatus> status_;
};

// How many processes are in process group `group` now (from /proc).
size_t processes_in_group(pid_t group);

// A child whose stdin and stdout are pipes to us (a line-protocol worker: Python rewards
// and tools). Its stderr goes to `output_path` (empty: ours). Both ends are close-on-exec.
struct PipedChild {
  ChildProcess process;
  int to_child = -1;    // its stdin
  int from_child = -1;  // its stdout
};
PipedChild spawn_piped(const std::vector<std::string>& argv, const std::string& output_path);
// The same with more options (a process group, limits); stdin_fd and stdout_fd are set here.
PipedChild spawn_piped(const std::vector<std::string>& argv, SpawnOptions options);

// Runs a command to its end and returns what it printed (stdout and stderr together).
// Error naming the command when it cannot start, runs past timeout_s (it is killed), or
// exits non-zero (with its output).
std::string run_command(const std::vector<std::string>& argv, double timeout_s);

// Whether a process with this pid exists (and is not a zombie).
bool process_alive(pid_t pid);

}  // namespace tandem
