#include "core/process.h"

#include "core/error.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tandem {

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal);
}

std::string ExitStatus::describe() const {
  if (signal != 0) return fmt::format("killed by signal {} ({})", signal, signal_name(signal));
  return fmt::format("exited with status {}", exit_code);
}

namespace {

ExitStatus from_wait_status(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) s.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) s.signal = WTERMSIG(status);
  return s;
}

}  // namespace

ChildProcess ChildProcess::spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  TANDEM_CHECK(!argv.empty(), "spawn needs a program");
  // Everything the child needs is prepared before fork: after it, a multi-threaded
  // parent's child may only make async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int output_fd = -1;
  if (!options.output_path.empty()) {
    output_fd = ::open(options.output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (output_fd < 0) {
      throw Error(fmt::format("cannot open {} for a child's output: {}", options.output_path, std::strerror(errno)));
    }
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const char exec_failed[] = "tandem: exec failed for the worker program\n";

  // The child's environment is built here: nothing but async-signal-safe calls after fork.
  std::vector<std::string> environment_entries;
  std::vector<char*> environment;
  if (!options.environment.empty()) {
    for (char** entry = environ; *entry; ++entry) {
      const std::string text = *entry;
      const std::string name = text.substr(0, text.find('=') + 1);
      bool replaced = false;
      for (const std::string& extra : options.environment) replaced = replaced || extra.rfind(name, 0) == 0;
      if (!replaced) environment_entries.push_back(text);
    }
    environment_entries.insert(environment_entries.end(), options.environment.begin(), options.environment.end());
    for (std::string& entry : environment_entries) environment.push_back(entry.data());
    environment.push_back(nullptr);
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    if (output_fd >= 0) ::close(output_fd);
    if (null_fd >= 0) ::close(null_fd);
    throw Error(fmt::format("fork failed: {}", std::strerror(err)));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(125);  // the parent died before prctl took effect
    if (options.own_process_group) ::setpgid(0, 0);
    if (options.max_data_bytes > 0) {
      const struct rlimit limit = {options.max_data_bytes, options.max_data_bytes};
      ::setrlimit(RLIMIT_DATA, &limit);
    }
    if (options.ignore_interrupt) ::signal(SIGINT, SIG_IGN);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    if (options.stdin_fd >= 0) {
      ::dup2(options.stdin_fd, STDIN_FILENO);
    } else if (null_fd >= 0) {
      ::dup2(null_fd, STDIN_FILENO);
    }
    if (output_fd >= 0) {
      ::dup2(output_fd, STDOUT_FILENO);
      ::dup2(output_fd, STDERR_FILENO);
    }
    if (options.stdout_fd >= 0) ::dup2(options.stdout_fd, STDOUT_FILENO);
    if (options.environment.empty()) {
      ::execv(args[0], args.data());
    } else {
      ::execve(args[0], args.data(), environment.data());
    }
    ssize_t ignored = ::write(STDERR_FILENO, exec_failed, sizeof exec_failed - 1);
    (void)ignored;
    ::_exit(127);
  }
  if (output_fd >= 0) ::close(output_fd);
  if (null_fd >= 0) ::close(null_fd);
  // Also in the parent: whichever runs first, the group exists before anyone kills it.
  if (options.own_process_group) ::setpgid(pid, pid);
  ChildProcess child;
  child.pid_ = pid;
  child.own_group_ = options.own_process_group;
  return child;
}

ChildProcess::~ChildProcess() {
  kill_and_reap();
  if (exit_fd_ >= 0) ::close(exit_fd_);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_), own_group_(other.own_group_), exit_fd_(other.exit_fd_), status_(other.status_) {
  other.pid_ = -1;
  other.exit_fd_ = -1;
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    if (exit_fd_ >= 0) ::close(exit_fd_);
    pid_ = other.pid_;
    own_group_ = other.own_group_;
    exit_fd_ = other.exit_fd_;
    status_ = other.status_;
    other.pid_ = -1;
    other.exit_fd_ = -1;
  }
  return *this;
}

int ChildProcess::exit_fd() {
  if (exit_fd_ < 0 && pid_ > 0 && !status_) exit_fd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  return exit_fd_;
}

std::optional<ExitStatus> ChildProcess::poll() {
  if (pid_ <= 0 || status_) return status_;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) status_ = from_wait_status(status);
  return status_;
}

std::optional<ExitStatus> ChildProcess::wait_for(double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    if (auto s = poll()) return s;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void ChildProcess::send_signal(int signal) {
  if (running()) ::kill(pid_, signal);
}

void ChildProcess::kill_and_reap() {
  // The group's id stays the leader's pid while any member lives (the kernel does not
  // reuse it meanwhile), so this reaches what the leader forked even after it ended.
  if (pid_ > 0 && own_group_) ::kill(-pid_, SIGKILL);
  if (pid_ <= 0 || status_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  status_ = from_wait_status(status);
}

namespace {

// The fields of /proc/PID/stat that follow the parenthesised command name (which may hold
// spaces and parentheses itself): state, ppid, pgrp. nullopt when the process is gone.
struct ProcStat {
  char state = 0;  // Z: zombie, X: dead
  long ppid = 0;
  long pgrp = 0;
  bool alive() const { return state != 'Z' && state != 'X'; }
};
std::optional<ProcStat> read_proc_stat(const std::string& path) {
  std::ifstream stat(path);
  if (!stat) return std::nullopt;
  const std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = content.rfind(')');
  if (close == std::string::npos || close + 2 >= content.size()) return std::nullopt;
  std::istringstream rest(content.substr(close + 2));
  ProcStat fields;
  if (!(rest >> fields.state >> fields.ppid >> fields.pgrp)) return std::nullopt;
  return fields;
}

}  // namespace

bool process_alive(pid_t pid) {
  const std::optional<ProcStat> stat = read_proc_stat("/proc/" + std::to_string(pid) + "/stat");
  return stat && stat->alive();
}

size_t processes_in_group(pid_t group) {
  size_t count = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::optional<ProcStat> stat = read_proc_stat((entry.path() / "stat").string());
    if (stat && stat->pgrp == group && stat->alive()) ++count;
  }
  return count;
}

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string directories = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= directories.size()) {
    size_t end = directories.find(':', start);
    if (end == std::string::npos) end = directories.size();
    const std::string candidate = (end > start ? directories.substr(start, end - start) : ".") + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

PipedChild spawn_piped(const std::vector<std::string>& argv, const std::string& output_path) {
  SpawnOptions options;
  options.output_path = output_path;
  return spawn_piped(argv, std::move(options));
}

PipedChild spawn_piped(const std::vector<std::string>& argv, SpawnOptions options) {
  int requests[2], replies[2];
  if (::pipe2(requests, O_CLOEXEC) != 0) throw Error(fmt::format("{}: pipe failed: {}", argv.at(0), std::strerror(errno)));
  if (::pipe2(replies, O_CLOEXEC) != 0) {
    ::close(requests[0]);
    ::close(requests[1]);
    throw Error(fmt::format("{}: pipe failed: {}", argv.at(0), std::strerror(errno)));
  }
  options.stdin_fd = requests[0];
  options.stdout_fd = replies[1];
  PipedChild child;
  try {
    child.process = ChildProcess::spawn(argv, options);
  } catch (...) {
    for (int fd : {requests[0], requests[1], replies[0], replies[1]}) ::close(fd);
    throw;
  }
  ::close(requests[0]);
  ::close(replies[1]);
  child.to_child = requests[1];
  child.from_child = replies[0];
  return child;
}

std::string run_command(const std::vector<std::string>& argv, double timeout_s) {
  TANDEM_CHECK(!argv.empty(), "run_command needs a program");
  std::string command;
  for (const std::string& part : argv) command += (command.empty() ? "" : " ") + part;
  const std::string program = find_on_path(argv[0]);
  if (program.empty()) throw Error(fmt::format("`{}`: {} is not installed (not on PATH)", command, argv[0]));
  char output_path[] = "/tmp/tandem-command-XXXXXX";
  int fd = ::mkstemp(output_path);
  if (fd < 0) throw Error(fmt::format("`{}`: cannot make a file for its output: {}", command, std::strerror(errno)));
  ::close(fd);
  std::vector<std::string> resolved = argv;
  resolved[0] = program;
  SpawnOptions options;
  options.output_path = output_path;
  ChildProcess child = ChildProcess::spawn(resolved, options);
  std::optional<ExitStatus> status = child.wait_for(timeout_s);
  if (!status) child.kill_and_reap();
  std::ifstream file(output_path);
  std::string output((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ::unlink(output_path);
  if (!status) throw Error(fmt::format("`{}` did not finish within {} s; it printed: {}", command, timeout_s, output));
  if (!status->success()) {
    throw Error(fmt::format("`{}` failed ({}): {}", command, status->describe(), output));
  }
  return output;
}

std::string current_executable() {
  char buffer[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  TANDEM_CHECK(n > 0, "cannot resolve /proc/self/exe");
  return std::string(buffer, static_cast<size_t>(n));
}

}  // namespace tandem
