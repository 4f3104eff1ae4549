// Running untrusted code (what the model writes, for the `builtin: python` tool) in a
// fresh, isolated process, one per call.
//
// The process runs under bubblewrap (Debian's `bwrap`) in its own user, PID, mount, IPC,
// UTS, cgroup and network namespaces: it sees /usr read-only, a private tmpfs as /tmp
// (its working directory), its own /proc and a minimal /dev, and nothing else (no /etc,
// /home, run directory or keys); its only network interface is its own loopback. It runs
// as an unprivileged user with no capabilities, cannot make user namespaces, and gets a
// scrubbed environment. A seccomp filter (libseccomp, sandbox_seccomp.h) refuses sockets
// other than AF_UNIX and the system calls that reach past a namespace (ptrace, mount,
// keyctl, bpf, perf_event_open, io_uring, module and clock calls, ...). Resource limits
// bound CPU time, address space, processes, file size and open files; a wall-clock
// deadline kills the whole sandbox, and every process in it dies with it (PID namespace).
//
// What it does not protect against: kernel bugs reachable through the system calls it
// allows, and side channels (timing, shared CPU caches). docs/sandbox.md says more.
#pragma once

#include "core/error.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct SandboxLimits {
  double wall_s = 10;           // the whole call, start to end; then everything is killed
  double cpu_s = 10;            // CPU time of each process (RLIMIT_CPU)
  int64_t memory_mb = 512;      // address space of each process (RLIMIT_AS)
  int64_t max_processes = 16;   // processes and threads at once, beyond the sandbox's own two
  int64_t max_file_mb = 16;     // largest file a process may write (RLIMIT_FSIZE)
  int64_t tmpfs_mb = 64;        // size of the private /tmp
  size_t max_output_bytes = 64 << 10;  // of stdout and of stderr each; the rest is dropped
};

// How a sandboxed call ended.
enum class SandboxEnd {
  exited,     // the command exited by itself (exit_code)
  signaled,   // the command was killed by a signal (signal): a CPU or memory limit, a crash
  timed_out,  // past limits.wall_s: the sandbox was killed
};

struct SandboxResult {
  SandboxEnd end = SandboxEnd::exited;
  int exit_code = -1;  // when exited
  int signal = 0;      // when signaled
  std::string stdout_text;
  std::string stderr_text;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  double seconds = 0;  // wall time of the call
};

// The sandbox could not be set up (bwrap missing or failing, no user namespaces): an
// infrastructure failure, not an error of the code that was to run.
class SandboxUnavailable : public Error {
 public:
  using Error::Error;
};

// Runs `argv` (argv[0] is looked up in the sandbox's PATH, /usr/bin:/bin) with
// `stdin_data` on its standard input. Throws SandboxUnavailable when the sandbox cannot
// be made.
SandboxResult run_sandboxed(const std::vector<std::string>& argv, const std::string& stdin_data,
                            const SandboxLimits& limits);

// Runs Python source `code` (python3 -I: no user site, no PYTHON* variables) in the sandbox.
SandboxResult run_python_sandboxed(const std::string& code, const SandboxLimits& limits);

// Why no sandbox can be made on this machine ("" when one can): bwrap missing, or it
// fails to start. Runs `bwrap` once (about 10 ms); tests call it to skip with the reason.
std::string sandbox_unavailable_reason();

// A one-line summary of how a call ended, e.g. "exit 1", "killed by SIGKILL",
// "timed out after 10 s".
std::string describe_end(const SandboxResult& result, const SandboxLimits& limits);

}  // namespace tandem
