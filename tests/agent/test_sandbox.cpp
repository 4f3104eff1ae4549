// The sandbox for the model's code (agent/sandbox.h) and the `builtin: python` tool on it
// (agent/python_sandbox_tool.h). It runs Python, and every escape the issue lists fails:
// a socket to anything, writing outside its tmpfs, reading the host's files, processes or
// open descriptors, a fork bomb, allocating past the limit, outliving the deadline,
// leaving a process behind. Exits 77 (skip) where no sandbox can be made here (bubblewrap
// missing, user namespaces off), saying why.
#include "agent/python_sandbox_tool.h"
#include "agent/sandbox.h"

#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

using namespace tandem;

namespace {

void skip_without_sandbox() {
  static const std::string reason = sandbox_unavailable_reason();
  if (!reason.empty()) {
    std::fprintf(stderr, "test_sandbox: skipped: no sandbox on this machine: %s\n", reason.c_str());
    std::exit(77);
  }
}

SandboxResult python(const std::string& code, SandboxLimits limits = {}) {
  skip_without_sandbox();
  return run_python_sandboxed(code, limits);
}

// Processes on this machine whose command line contains `marker`.
int processes_with(const std::string& marker) {
  int count = 0;
  DIR* proc = opendir("/proc");
  REQUIRE(proc != nullptr);
  while (const dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(marker) != std::string::npos) ++count;
  }
  closedir(proc);
  return count;
}

}  // namespace

TEST_CASE("python runs in the sandbox: output, exit status, truncation") {
  SandboxResult r = python("import sys\nprint('hello', 6 * 7)\nprint('warn', file=sys.stderr)\nsys.exit(3)\n");
  CHECK(r.end == SandboxEnd::exited);
  CHECK(r.exit_code == 3);
  CHECK(r.stdout_text == "hello 42\n");
  CHECK(r.stderr_text == "warn\n");

  SandboxLimits small;
  small.max_output_bytes = 1000;
  r = python("print('x' * 100000)\n", small);
  CHECK(r.end == SandboxEnd::exited);
  CHECK(r.exit_code == 0);
  CHECK(r.stdout_text.size() == 1000);
  CHECK(r.stdout_truncated);
  CHECK_FALSE(r.stderr_truncated);

  r = python("raise ValueError('bad input')\n");
  CHECK(r.exit_code == 1);
  CHECK(r.stderr_text.find("ValueError: bad input") != std::string::npos);
}

TEST_CASE("the sandbox's user, environment and host name are its own") {
  const SandboxResult r = python(
      "import os, socket\n"
      "print(os.getuid(), os.getgid(), os.geteuid())\n"
      "print(sorted(os.environ))\n"
      "print(socket.gethostname())\n"
      "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n");
  REQUIRE(r.end == SandboxEnd::exited);
  CHECK(r.stdout_text ==
        "65534 65534 65534\n"
        "['HOME', 'LANG', 'MKL_NUM_THREADS', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'PATH', 'PWD', "
        "'PYTHONDONTWRITEBYTECODE']\n"
        "sandbox\n"
        "0000000000000000\n");
}

TEST_CASE("escape: no socket reaches anything") {
  // A listening abstract Unix socket in this (the host's) network namespace: abstract
  // names are per network namespace, so the sandbox cannot see it even though AF_UNIX
  // sockets are allowed there.
  const std::string name = "tandem-sandbox-test-" + std::to_string(getpid());
  const int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  const socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&address), length) == 0);
  REQUIRE(listen(listener, 1) == 0);

  const SandboxResult r = python(
      "import socket, errno\n"
      "for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET):\n"
      "    try:\n"
      "        socket.socket(family, socket.SOCK_RAW if family == socket.AF_PACKET else socket.SOCK_STREAM if family != socket.AF_NETLINK else socket.SOCK_RAW)\n"
      "        print('opened', family)\n"
      "    except OSError as e:\n"
      "        print(errno.errorcode[e.errno])\n"
      "print([line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:]])\n"
      "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
      "try:\n"
      "    s.connect('\\0" + name + "')\n"
      "    print('connected')\n"
      "except OSError as e:\n"
      "    print(errno.errorcode[e.errno])\n");
  close(listener);
  REQUIRE(r.end == SandboxEnd::exited);
  CHECK(r.stdout_text == "EAFNOSUPPORT\nEAFNOSUPPORT\nEAFNOSUPPORT\nEAFNOSUPPORT\n['lo']\nECONNREFUSED\n");
}

TEST_CASE("escape: nothing outside its tmpfs is written, no host file or process is seen") {
  // A "run directory" with a secret, on the host.
  char dir[] = "/tmp/tandem-sandbox-run-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string secret = std::string(dir) + "/keys.json";
  { std::ofstream(secret) << "{\"key\": \"do-not-read\"}"; }
  const SandboxResult r = python(
      "import os, errno\n"
      "def attempt(what, f):\n"
      "    try:\n"
      "        f()\n"
      "        print(what, 'ok')\n"
      "    except OSError as e:\n"
      "        print(what, errno.errorcode[e.errno])\n"
      "attempt('write /usr', lambda: open('/usr/owned', 'w'))\n"
      "attempt('write /', lambda: open('/owned', 'w'))\n"
      "attempt('read secret', lambda: open('" + secret + "').read())\n"
      "attempt('read /etc/shadow', lambda: open('/etc/shadow').read())\n"
      "attempt('list /root', lambda: os.listdir('/root'))\n"
      "attempt('host process', lambda: open('/proc/" + std::to_string(getpid()) + "/environ').read())\n"
      "attempt('write /tmp', lambda: open('/tmp/mine', 'w').write('x'))\n"
      "print('unexpected in /:', sorted(set(os.listdir('/')) - {'bin', 'dev', 'lib', 'lib32', 'lib64', 'libx32', 'proc',\n"
      "                                                      'sbin', 'tmp', 'usr'}))\n");
  std::remove(secret.c_str());
  rmdir(dir);
  REQUIRE(r.end == SandboxEnd::exited);
  INFO(r.stdout_text);
  const std::string host_process = getpid() > 4 ? "host process ENOENT\n" : "";
  CHECK(r.stdout_text.find("write /usr EROFS\n") != std::string::npos);
  CHECK(r.stdout_text.find("write / EROFS\n") != std::string::npos);
  CHECK(r.stdout_text.find("read secret ENOENT\n") != std::string::npos);
  CHECK(r.stdout_text.find("read /etc/shadow ENOENT\n") != std::string::npos);
  CHECK(r.stdout_text.find("list /root ENOENT\n") != std::string::npos);
  CHECK(r.stdout_text.find(host_process) != std::string::npos);
  CHECK(r.stdout_text.find("write /tmp ok\n") != std::string::npos);
  CHECK(r.stdout_text.find("unexpected in /: []\n") != std::string::npos);
}

TEST_CASE("escape: no file the controller has open reaches the sandbox") {
  skip_without_sandbox();
  // A file opened without close-on-exec, as fopen opens metrics.jsonl and the log.
  const int file = open("/dev/null", O_WRONLY);
  REQUIRE(file >= 0);
  REQUIRE(dup2(file, 200) == 200);  // dup2's copy is never close-on-exec
  close(file);
  const SandboxResult r = run_python_sandboxed("import os\nprint(sorted(int(f) for f in os.listdir('/proc/self/fd')))\n", {});
  close(200);
  REQUIRE(r.end == SandboxEnd::exited);
  CHECK(r.stdout_text == "[0, 1, 2, 3]\n");  // stdin, stdout, stderr, and listdir's own
}

TEST_CASE("escape: /dev is read-only and /dev/shm small") {
  const SandboxResult r = python(
      "import errno\n"
      "for path, size in (('/dev/mine', 1), ('/dev/shm/big', 2 << 20)):\n"
      "    try:\n"
      "        open(path, 'wb').write(b'x' * size)\n"
      "        print(path, 'ok')\n"
      "    except OSError as e:\n"
      "        print(path, errno.errorcode[e.errno])\n");
  REQUIRE(r.end == SandboxEnd::exited);
  CHECK(r.stdout_text == "/dev/mine EROFS\n/dev/shm/big ENOSPC\n");
}

TEST_CASE("a command bwrap cannot start is SandboxUnavailable, not the code's failure") {
  skip_without_sandbox();
  CHECK_THROWS_AS(run_sandboxed({"/nonexistent/program"}, "", {}), SandboxUnavailable);
  try {
    run_sandboxed({"/nonexistent/program"}, "", {});
  } catch (const SandboxUnavailable& e) {
    CHECK(std::string(e.what()).rfind("sandbox: bwrap could not run the command (bwrap: execvp /nonexistent/program", 0) == 0);
  }
}

TEST_CASE("escape: the system calls that reach past a namespace are refused") {
  const SandboxResult r = python(
      "import ctypes, errno, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "def call(name, *args):\n"
      "    rc = getattr(libc, name)(*args)\n"
      "    print(name, rc, errno.errorcode.get(ctypes.get_errno(), 0) if rc == -1 else '')\n"
      "call('ptrace', 16, os.getppid(), 0, 0)\n"           // PTRACE_ATTACH
      "call('unshare', 0x10000000)\n"                       // CLONE_NEWUSER
      "call('mount', b'none', b'/tmp', b'tmpfs', 0, 0)\n");
  REQUIRE(r.end == SandboxEnd::exited);
  // ptrace and unshare fail only through the filter; mount would fail without it too
  // (no capabilities), so it is a check of the whole, not of the rule.
  CHECK(r.stdout_text == "ptrace -1 EPERM\nunshare -1 EPERM\nmount -1 EPERM\n");
#if defined(__x86_64__)
  // By number, x86-64's: what glibc has no wrapper for, and clone's flags.
  const SandboxResult raw = python(
      "import ctypes, errno, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "for name, number, args in (('io_uring_setup', 425, (1, 0)), ('keyctl', 250, (0, 0)), ('bpf', 321, (0, 0, 0)),\n"
      "                           ('memfd_create', 319, (b'x', 0)), ('clone3', 435, (0, 0)),\n"
      "                           ('clone CLONE_NEWUSER', 56, (0x10000000 | 17, 0, 0, 0, 0))):\n"
      "    rc = libc.syscall(number, *args)\n"
      "    print(name, rc, errno.errorcode.get(ctypes.get_errno(), 0) if rc == -1 else '')\n");
  REQUIRE(raw.end == SandboxEnd::exited);
  CHECK(raw.stdout_text ==
        "io_uring_setup -1 EPERM\nkeyctl -1 EPERM\nbpf -1 EPERM\nmemfd_create -1 EPERM\nclone3 -1 ENOSYS\n"
        "clone CLONE_NEWUSER -1 EPERM\n");
#endif
}

TEST_CASE("escape: a fork bomb stops at the process limit and leaves nothing behind") {
  SandboxLimits limits;
  limits.max_processes = 8;
  limits.wall_s = 20;
  const SandboxResult r = python(
      "import os, time\n"
      "children = 0\n"
      "try:\n"
      "    while True:\n"
      "        if os.fork() == 0:\n"
      "            os.execv('/bin/sleep', ['sleep', '271.828'])\n"
      "        children += 1\n"
      "except OSError as e:\n"
      "    print('stopped after', children)\n",
      limits);
  REQUIRE(r.end == SandboxEnd::exited);
  INFO(r.stdout_text << r.stderr_text);
  REQUIRE(r.stdout_text.rfind("stopped after ", 0) == 0);
  // As root the sandbox runs as its own user, whose processes are the sandbox's alone; as
  // another user the limit counts that user's other processes too, which may come and go.
  if (geteuid() == 0) CHECK(std::stoi(r.stdout_text.substr(14)) <= limits.max_processes);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(processes_with("271.828") == 0);  // the sleeping children died with the sandbox
}

TEST_CASE("escape: a daemon does not outlive the call") {
  const SandboxResult r = python(
      "import os\n"
      "if os.fork() == 0:\n"
      "    os.setsid()\n"
      "    if os.fork() == 0:\n"
      "        os.execv('/bin/sleep', ['sleep', '314.159'])\n"
      "    os._exit(0)\n"
      "print('parent done')\n");
  CHECK(r.end == SandboxEnd::exited);
  CHECK(r.stdout_text == "parent done\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(processes_with("314.159") == 0);
}

TEST_CASE("escape: memory, file size and CPU time stop at their limits") {
  SandboxLimits limits;
  limits.memory_mb = 256;
  limits.max_file_mb = 4;
  SandboxResult r = python(
      "import errno\n"
      "try:\n"
      "    block = bytearray(1 << 30)\n"
      "    print('allocated')\n"
      "except MemoryError:\n"
      "    print('MemoryError')\n"
      "try:\n"
      "    open('/tmp/big', 'wb').write(b'x' * (8 << 20))\n"
      "    print('wrote')\n"
      "except OSError as e:\n"
      "    print(errno.errorcode[e.errno])\n",
      limits);
  REQUIRE(r.end == SandboxEnd::exited);
  CHECK(r.stdout_text == "MemoryError\nEFBIG\n");

  limits.cpu_s = 1;
  limits.wall_s = 30;
  r = python("while True:\n    pass\n", limits);
  CHECK(r.end == SandboxEnd::signaled);
  CHECK((r.signal == SIGXCPU || r.signal == SIGKILL));  // the CPU limit, well before the 30 s deadline
  CHECK(r.seconds < limits.wall_s);
}

TEST_CASE("escape: the wall-clock deadline kills the whole sandbox") {
  SandboxLimits limits;
  limits.wall_s = 3;  // room for Python to start and print on a loaded machine
  const SandboxResult r = python(
      "import os, time\n"
      "if os.fork() == 0:\n"
      "    os.execv('/bin/sleep', ['sleep', '161.803'])\n"
      "print('waiting', flush=True)\n"
      "time.sleep(60)\n",
      limits);
  CHECK(r.end == SandboxEnd::timed_out);
  CHECK(r.stdout_text == "waiting\n");
  CHECK(r.seconds >= 3.0);
  CHECK(r.seconds < 8.0);
  CHECK(describe_end(r, limits) == "timed out after 3 s");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(processes_with("161.803") == 0);
}

TEST_CASE("no bwrap on PATH is a SandboxUnavailable naming the package") {
  skip_without_sandbox();
  const std::string path = std::getenv("PATH");
  setenv("PATH", "/nonexistent", 1);
  CHECK_THROWS_WITH_AS(run_python_sandboxed("print(1)", {}),
                       "sandbox: bubblewrap (bwrap) is not installed; on Debian: apt-get install bubblewrap",
                       SandboxUnavailable);
  setenv("PATH", path.c_str(), 1);
}

TEST_CASE("the builtin python tool: output, the model's errors, timeouts") {
  skip_without_sandbox();
  PythonToolOptions options;
  options.limits.wall_s = 2;
  options.max_observation_bytes = 100;
  std::unique_ptr<Tool> tool = make_python_sandbox_tool(options);
  CHECK(tool->name() == "python");
  const nlohmann::ordered_json schema = tool->schema();
  CHECK(schema["function"]["name"] == "python");
  CHECK(schema["function"]["parameters"]["required"] == nlohmann::json::array({"code"}));

  ToolResult r = tool->call({{"code", "print(2 ** 10)"}});
  CHECK_FALSE(r.error);
  CHECK(r.stop.empty());
  CHECK(r.observation == "1024\n");

  r = tool->call({{"code", "x = 1"}});
  CHECK(r.observation == "(no output)");

  r = tool->call({{"source", "print(1)"}});
  CHECK(r.error);
  CHECK(r.observation == "error: the python tool takes {\"code\": \"<a Python program>\"}");

  r = tool->call({{"code", "print('before')\n1 / 0\n"}});
  CHECK(r.error);
  CHECK(r.observation.rfind("before\nexit status 1\n", 0) == 0);
  CHECK(r.observation.find("ZeroDivisionError: division by zero") != std::string::npos);

  r = tool->call({{"code", "print('y' * 500)"}});
  CHECK_FALSE(r.error);
  CHECK(r.observation == std::string(100, 'y') + "\n[output cut]");

  r = tool->call({{"code", "print('\\u00e9' * 80)"}});  // 160 bytes of two-byte characters, cut at 100
  CHECK(r.observation.size() == 100 + std::string("\n[output cut]").size());
  CHECK_NOTHROW(nlohmann::json(r.observation).dump());  // dump() throws on invalid UTF-8

  r = tool->call({{"code", "import time\ntime.sleep(30)"}});
  CHECK(r.error);
  CHECK(r.stop == "tool_timeout");
  CHECK(r.observation == "timed out after 2 s");
}
