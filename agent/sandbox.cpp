// One sandboxed call (sandbox.h): the bwrap command line, the child's limits and user,
// and the parent's loop that feeds stdin, collects stdout and stderr, and enforces the
// deadline.
#include "agent/sandbox.h"

#include "agent/sandbox_seccomp.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

namespace tandem {

namespace {

using Clock = std::chrono::steady_clock;

// The user a sandbox runs as when tandem runs as root ("nobody"): resource limits on
// processes count per user, and root is exempt from them.
constexpr uid_t kSandboxUser = 65534;
constexpr gid_t kSandboxGroup = 65534;

std::string find_bwrap() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path && *path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;  // not the working directory
    const std::string candidate = dir + "/bwrap";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// /usr read-only; the top-level /bin, /lib, ... as the symlinks into /usr they are on a
// merged-/usr system (or read-only binds where they are directories).
void add_system_view(std::vector<std::string>& args) {
  args.insert(args.end(), {"--ro-bind", "/usr", "/usr"});
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"}) {
    struct stat st{};
    if (::lstat(top, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      std::array<char, 4096> target{};
      const ssize_t n = ::readlink(top, target.data(), target.size() - 1);
      if (n > 0) args.insert(args.end(), {"--symlink", std::string(target.data(), static_cast<size_t>(n)), top});
    } else if (S_ISDIR(st.st_mode)) {
      args.insert(args.end(), {"--ro-bind", top, top});
    }
  }
}

// Tasks (processes and threads) of `uid` now: RLIMIT_NPROC counts them all, so the
// sandbox's limit is this plus its own allowance.
int64_t tasks_of(uid_t uid) {
  int64_t count = 0;
  DIR* proc = ::opendir("/proc");
  if (!proc) return 0;
  while (const dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const std::string dir = std::string("/proc/") + entry->d_name;
    struct stat st{};
    if (::stat(dir.c_str(), &st) != 0 || st.st_uid != uid) continue;
    if (DIR* tasks = ::opendir((dir + "/task").c_str())) {
      while (const dirent* task = ::readdir(tasks)) count += task->d_name[0] != '.';
      ::closedir(tasks);
    }
  }
  ::closedir(proc);
  return count;
}

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    reset();
    fd = o.fd;
    o.fd = -1;
    return *this;
  }
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

std::pair<Fd, Fd> make_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw SandboxUnavailable(fmt::format("sandbox: pipe: {}", std::strerror(errno)));
  return {Fd(p[0]), Fd(p[1])};
}

// What the child does between fork and exec: only async-signal-safe calls (the parent may
// have other threads), every value prepared before the fork.
struct ChildPlan {
  const char* bwrap = nullptr;
  std::vector<char*> argv;  // null-terminated
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  int keep_fds[2] = {-1, -1};  // the seccomp program and bwrap's status pipe
  int max_fd = 1024;           // fds below this are closed on exec where close_range cannot
  bool drop_to_sandbox_user = false;
  rlimit cpu{}, address_space{}, file_size{}, processes{}, open_files{}, core{};
};

[[noreturn]] void fail(const char* what) {
  const char* message = "sandbox: child setup failed: ";
  (void)!::write(2, message, std::strlen(message));
  (void)!::write(2, what, std::strlen(what));
  (void)!::write(2, "\n", 1);
  ::_exit(127);
}

[[noreturn]] void run_child(const ChildPlan& plan) {
  if (::dup2(plan.stdin_fd, 0) < 0 || ::dup2(plan.stdout_fd, 1) < 0 || ::dup2(plan.stderr_fd, 2) < 0) fail("dup2");
  // Nothing the controller has open (metrics and log files, sockets) may reach the
  // sandbox: every fd above stderr closes on exec, then the two bwrap needs are kept.
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < plan.max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  for (int fd : plan.keep_fds) {
    if (::fcntl(fd, F_SETFD, 0) != 0) fail("fcntl");
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the controller's blocked signals are not the sandbox's
  ::setsid();  // its own process group: the deadline kills the group
  if (::setrlimit(RLIMIT_CORE, &plan.core) != 0 || ::setrlimit(RLIMIT_CPU, &plan.cpu) != 0 ||
      ::setrlimit(RLIMIT_AS, &plan.address_space) != 0 || ::setrlimit(RLIMIT_FSIZE, &plan.file_size) != 0 ||
      ::setrlimit(RLIMIT_NOFILE, &plan.open_files) != 0) {
    fail("setrlimit");
  }
  if (plan.drop_to_sandbox_user) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kSandboxGroup) != 0 || ::setuid(kSandboxUser) != 0) fail("setuid");
  }
  // After the change of user: the count is the sandbox user's.
  if (::setrlimit(RLIMIT_NPROC, &plan.processes) != 0) fail("setrlimit(RLIMIT_NPROC)");
  ::signal(SIGPIPE, SIG_DFL);
  ::execv(plan.bwrap, plan.argv.data());
  fail("exec bwrap");
}

rlimit limit_of(uint64_t value) { return {static_cast<rlim_t>(value), static_cast<rlim_t>(value)}; }

// Appends from `fd` to `out` up to `cap` bytes (the rest is read and dropped, so that the
// writer never blocks). Returns false at end of file.
bool drain(int fd, std::string& out, size_t cap, bool& truncated) {
  std::array<char, 16384> buffer{};
  const ssize_t n = ::read(fd, buffer.data(), buffer.size());
  if (n == 0) return false;
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  const size_t room = cap > out.size() ? cap - out.size() : 0;
  out.append(buffer.data(), std::min(room, static_cast<size_t>(n)));
  if (static_cast<size_t>(n) > room) truncated = true;
  return true;
}

// The value of `key` in bwrap's --json-status-fd lines, if one has it.
std::optional<int64_t> status_value(const std::string& status_text, const char* key) {
  std::istringstream lines(status_text);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains(key) && j[key].is_number_integer()) return j[key].get<int64_t>();
  }
  return std::nullopt;
}

// Waits, at most `seconds`, until process `pid` has ended (gone or a zombie). A PID
// namespace's first process becomes a zombie only after every other process in the
// namespace has ended. Only waits: a reused pid costs time, not a wrong kill.
void wait_until_gone(pid_t pid, double seconds) {
  const Clock::time_point until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(seconds));
  const std::string stat_path = "/proc/" + std::to_string(pid) + "/stat";
  while (Clock::now() < until) {
    std::ifstream in(stat_path);
    std::string stat;
    if (!std::getline(in, stat)) return;
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') return;
    ::usleep(2000);
  }
}

}  // namespace

SandboxResult run_sandboxed(const std::vector<std::string>& command, const std::string& stdin_data,
                            const SandboxLimits& limits) {
  TANDEM_CHECK(!command.empty(), "sandbox: no command");
  const std::string bwrap = find_bwrap();
  if (bwrap.empty()) {
    throw SandboxUnavailable("sandbox: bubblewrap (bwrap) is not installed; on Debian: apt-get install bubblewrap");
  }
  const Clock::time_point start = Clock::now();
  Fd seccomp(make_sandbox_seccomp_fd());
  auto [status_read, status_write] = make_pipe();  // bwrap's --json-status-fd: the child started, and its exit
  auto [out_read, out_write] = make_pipe();
  auto [err_read, err_write] = make_pipe();
  // stdin is a socket pair so that the parent's writes never raise SIGPIPE (MSG_NOSIGNAL).
  int in_pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in_pair) != 0) {
    throw SandboxUnavailable(fmt::format("sandbox: socketpair: {}", std::strerror(errno)));
  }
  Fd in_child(in_pair[0]), in_parent(in_pair[1]);
  ::shutdown(in_child.fd, SHUT_WR);

  std::vector<std::string> args = {"bwrap", "--unshare-all", "--unshare-user", "--disable-userns",
                                   "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                                   "--uid", std::to_string(kSandboxUser), "--gid", std::to_string(kSandboxGroup),
                                   "--hostname", "sandbox"};
  add_system_view(args);
  args.insert(args.end(), {"--proc", "/proc", "--dev", "/dev",
                           // /dev/shm (POSIX shared memory, semaphores) small; the rest of /dev read-only.
                           "--size", std::to_string(1 << 20), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
                           "--size", std::to_string(limits.tmpfs_mb << 20), "--tmpfs", "/tmp",
                           // The root bwrap builds is itself a tmpfs: read-only, so that /tmp (and the 1 MiB
                           // /dev/shm) are the only places to write.
                           "--remount-ro", "/", "--chdir", "/tmp",
                           "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
                           "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
                           // One thread per numerical library: a pool sized to the host would hit the process limit.
                           "--setenv", "OMP_NUM_THREADS", "1", "--setenv", "OPENBLAS_NUM_THREADS", "1",
                           "--setenv", "MKL_NUM_THREADS", "1",
                           "--seccomp", std::to_string(seccomp.fd),
                           "--json-status-fd", std::to_string(status_write.fd), "--"});
  args.insert(args.end(), command.begin(), command.end());

  ChildPlan plan;
  plan.bwrap = bwrap.c_str();
  for (std::string& a : args) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  plan.stdin_fd = in_child.fd;
  plan.stdout_fd = out_write.fd;
  plan.stderr_fd = err_write.fd;
  plan.keep_fds[0] = seccomp.fd;
  plan.keep_fds[1] = status_write.fd;
  plan.drop_to_sandbox_user = ::geteuid() == 0;
  const uid_t counted_user = plan.drop_to_sandbox_user ? kSandboxUser : ::getuid();
  // bwrap and its reaper (PID 1 of the namespace) are two more.
  plan.processes = limit_of(static_cast<uint64_t>(tasks_of(counted_user) + limits.max_processes + 2));
  const uint64_t cpu = static_cast<uint64_t>(std::ceil(std::max(1.0, limits.cpu_s)));
  plan.cpu = {static_cast<rlim_t>(cpu), static_cast<rlim_t>(cpu + 1)};  // SIGXCPU, then SIGKILL a second later
  plan.address_space = limit_of(static_cast<uint64_t>(limits.memory_mb) << 20);
  plan.file_size = limit_of(static_cast<uint64_t>(limits.max_file_mb) << 20);
  plan.open_files = limit_of(256);
  plan.core = limit_of(0);
  if (!plan.drop_to_sandbox_user) {  // an ordinary user cannot raise a hard limit: stay within the current ones
    const std::pair<int, rlimit*> all[] = {{RLIMIT_CPU, &plan.cpu}, {RLIMIT_AS, &plan.address_space},
                                           {RLIMIT_FSIZE, &plan.file_size}, {RLIMIT_NPROC, &plan.processes},
                                           {RLIMIT_NOFILE, &plan.open_files}};
    for (const auto& [resource, limit] : all) {
      rlimit current{};
      if (::getrlimit(resource, &current) != 0) continue;
      limit->rlim_max = std::min(limit->rlim_max, current.rlim_max);
      limit->rlim_cur = std::min(limit->rlim_cur, limit->rlim_max);
    }
  }
  rlimit open_now{};
  if (::getrlimit(RLIMIT_NOFILE, &open_now) == 0 && open_now.rlim_cur != RLIM_INFINITY) {
    plan.max_fd = static_cast<int>(std::min<rlim_t>(open_now.rlim_cur, 1 << 20));
  }

  const pid_t pid = ::fork();
  if (pid < 0) throw SandboxUnavailable(fmt::format("sandbox: fork: {}", std::strerror(errno)));
  if (pid == 0) run_child(plan);
  in_child.reset();
  out_write.reset();
  err_write.reset();
  status_write.reset();
  seccomp.reset();

  // Until it is reaped, a failure on this side (poll, an allocation) still kills and reaps it.
  struct Reaper {
    pid_t pid;
    bool done = false;
    ~Reaper() {
      if (done) return;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      int ignored = 0;
      ::waitpid(pid, &ignored, 0);
    }
  } reaper{pid};

  SandboxResult result;
  std::string status_text;
  bool status_truncated = false;
  bool out_open = true, err_open = true, status_open = true;
  size_t written = 0;
  ::fcntl(in_parent.fd, F_SETFL, O_NONBLOCK);
  if (stdin_data.empty()) in_parent.reset();
  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(limits.wall_s));
  // One round: feeds stdin, reads what is ready, waiting at most `wait_ms`.
  auto pump = [&](int wait_ms) {
    std::vector<pollfd> fds;
    if (in_parent.fd >= 0) fds.push_back({in_parent.fd, POLLOUT, 0});
    if (out_open) fds.push_back({out_read.fd, POLLIN, 0});
    if (err_open) fds.push_back({err_read.fd, POLLIN, 0});
    if (status_open) fds.push_back({status_read.fd, POLLIN, 0});
    if (fds.empty()) {
      ::usleep(static_cast<useconds_t>(wait_ms) * 1000);
      return;
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
      throw SandboxUnavailable(fmt::format("sandbox: poll: {}", std::strerror(errno)));
    }
    for (const pollfd& p : fds) {
      if (!p.revents) continue;
      if (p.fd == in_parent.fd) {
        const ssize_t n = ::send(in_parent.fd, stdin_data.data() + written, stdin_data.size() - written, MSG_NOSIGNAL);
        if (n > 0) written += static_cast<size_t>(n);
        if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == stdin_data.size()) in_parent.reset();
      } else if (p.fd == out_read.fd) {
        out_open = drain(out_read.fd, result.stdout_text, limits.max_output_bytes, result.stdout_truncated);
      } else if (p.fd == err_read.fd) {
        err_open = drain(err_read.fd, result.stderr_text, limits.max_output_bytes, result.stderr_truncated);
      } else if (p.fd == status_read.fd) {
        status_open = drain(status_read.fd, status_text, 4096, status_truncated);
      }
    }
  };
  bool timed_out = false;
  int wait_status = 0;
  while (!reaper.done) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      // bwrap and its group; the sandbox's first process gets SIGKILL as bwrap dies
      // (--die-with-parent), and its PID namespace, every process in it, ends with it.
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &wait_status, 0);
      reaper.done = true;
      if (const auto child = status_value(status_text, "child-pid")) wait_until_gone(static_cast<pid_t>(*child), 2.0);
      // What the sandbox wrote before it died, up to the end of each stream.
      for (int round = 0; round < 10 && (out_open || err_open); ++round) pump(50);
      break;
    }
    // With every stream closed, the child's exit is polled every 2 ms.
    const bool streams_open = in_parent.fd >= 0 || out_open || err_open || status_open;
    pump(streams_open ? static_cast<int>(std::min<int64_t>(left, 50)) : 2);
    if (!out_open && !err_open && !status_open && ::waitpid(pid, &wait_status, WNOHANG) == pid) reaper.done = true;
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (timed_out) {
    result.end = SandboxEnd::timed_out;
    return result;
  }

  // bwrap writes {"child-pid": N} when it has forked, before its mounts and the exec, and
  // {"exit-code": N} once the command ran and ended: without the latter, the sandbox
  // itself failed (a mount, a missing command), not the code.
  const std::optional<int64_t> exit_code = status_value(status_text, "exit-code");
  if (!exit_code) {
    const std::string why = result.stderr_text.substr(0, result.stderr_text.find('\n'));
    std::string how;
    if (WIFEXITED(wait_status)) how = fmt::format(", exit {}", WEXITSTATUS(wait_status));
    if (WIFSIGNALED(wait_status)) how = fmt::format(", bwrap killed by signal {}", WTERMSIG(wait_status));
    throw SandboxUnavailable(
        fmt::format("sandbox: bwrap could not run the command ({}{})", why.empty() ? "no message" : why, how));
  }
  // The command's status, or 128 + the signal that killed it.
  const int64_t code = *exit_code;
  if (code > 128 && code < 128 + 65) {
    result.end = SandboxEnd::signaled;
    result.signal = static_cast<int>(code - 128);
  } else {
    result.end = SandboxEnd::exited;
    result.exit_code = static_cast<int>(code);
  }
  return result;
}

SandboxResult run_python_sandboxed(const std::string& code, const SandboxLimits& limits) {
  return run_sandboxed({"python3", "-I", "-"}, code, limits);
}

std::string sandbox_unavailable_reason() {
  try {
    SandboxLimits limits;
    limits.wall_s = 20;
    const SandboxResult r = run_sandboxed({"true"}, "", limits);
    if (r.end != SandboxEnd::exited || r.exit_code != 0) {
      return "a sandboxed `true` did not exit 0 (" + describe_end(r, limits) + "): " + r.stderr_text;
    }
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string describe_end(const SandboxResult& result, const SandboxLimits& limits) {
  switch (result.end) {
    case SandboxEnd::exited:
      return fmt::format("exit {}", result.exit_code);
    case SandboxEnd::signaled: {
      const char* name = ::sigabbrev_np(result.signal);
      return fmt::format("killed by SIG{}", name ? name : std::to_string(result.signal).c_str());
    }
    case SandboxEnd::timed_out:
      return fmt::format("timed out after {:g} s", limits.wall_s);
  }
  return "?";
}

}  // namespace tandem
