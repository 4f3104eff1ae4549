// The worker side of hang diagnosis: see stack_dump.h for the design. This file: the
// signal handlers and the capture of each thread's return addresses, the dumper thread,
// and the dump's text; the frames' symbols are looked up in stack_dump_symbols.cpp.
#include "core/stack_dump.h"

#include "core/error.h"
#include "core/log.h"
#include "core/stack_dump_symbols.h"

#include <dirent.h>
#include <execinfo.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxFrames = 128;
// Frames of the capture itself on top of every stack: the handler and the kernel's
// signal trampoline (__restore_rt). The frame below them is where the thread was.
constexpr int kHandlerFrames = 2;
// A thread that runs (or sleeps interruptibly) answers in microseconds; one stuck in
// uninterruptible kernel sleep (D state) never does, and must not hold up the others.
constexpr auto kThreadAnswerTimeout = std::chrono::milliseconds(500);

// A real-time signal nobody else in tandem uses; SIGRTMIN itself is glibc's business.
int capture_signal() { return SIGRTMIN + 4; }
pid_t current_tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

// One capture at a time, in this preallocated slot. The states keep a late handler
// harmless: once the dumper gave up on a thread (abandoned), that thread's handler
// leaves the slot alone, and a handler whose tid is not the slot's returns at once.
enum SlotState : int { slot_idle, slot_requested, slot_writing, slot_done, slot_abandoned };
struct CaptureSlot {
  std::atomic<pid_t> tid{0};
  std::atomic<int> state{slot_idle};
  int depth = 0;
  void* frames[kMaxFrames];
};
CaptureSlot g_slot;
sem_t g_captured;
bool g_slot_stuck = false;  // a handler began writing and never finished: no more captures

// Written by the trigger handler (lock-free atomics and write(2) only).
std::atomic<uint64_t> g_signal_dump_id{0};
std::atomic<bool> g_signal_without_id{false};
std::atomic<int> g_signal_sender{0};
int g_trigger_fd = -1;  // eventfd: a dump is wanted (the dumper blocks reading it)
int g_done_fd = -1;     // eventfd: a dump was written (the I/O thread polls it)

void capture_handler(int) {
  const int saved_errno = errno;
  if (g_slot.tid.load() == current_tid()) {
    int expected = slot_requested;
    if (g_slot.state.compare_exchange_strong(expected, slot_writing)) {
      g_slot.depth = ::backtrace(g_slot.frames, kMaxFrames);
      g_slot.state.store(slot_done);
      ::sem_post(&g_captured);
    }
  }
  errno = saved_errno;
}

void raise_to(std::atomic<uint64_t>& value, uint64_t at_least) {
  uint64_t current = value.load();
  while (current < at_least && !value.compare_exchange_weak(current, at_least)) {
  }
}

void post(int fd) {
  const uint64_t one = 1;
  if (fd >= 0) (void)!::write(fd, &one, sizeof one);
}

void trigger_handler(int, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const uint64_t id =
      info && info->si_code == SI_QUEUE ? static_cast<uint64_t>(static_cast<uint32_t>(info->si_value.sival_int)) : 0;
  if (id != 0) {
    raise_to(g_signal_dump_id, id);
  } else {
    g_signal_without_id.store(true);
  }
  if (info) g_signal_sender.store(info->si_pid);
  post(g_trigger_fd);
  errno = saved_errno;
}

struct RunningCommand {
  uint64_t token;
  std::string name;
  uint64_t request_id;
  Clock::time_point started;
};

// What the handlers need not touch, behind one mutex (held only for copies).
struct State {
  std::mutex mutex;
  std::string worker_name = "worker";
  std::vector<std::pair<int, std::string>> labels;  // tid -> label
  std::vector<RunningCommand> commands;             // outermost first
  uint64_t next_token = 1;
  uint64_t requested_id = 0;  // highest id asked by stack_dump_request
  std::string requested_reason;
  bool requested_without_id = false;
  std::string without_id_reason;
  uint64_t written_id = 0;
  std::string written_summary;
  std::mutex capture_mutex;  // one capture_all at a time: there is one slot
};
// Never destroyed: the detached dumper thread may still use it while statics go away.
State& state() {
  static State* s = new State;
  return *s;
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool blocks_signal(int tid, int signal) {
  std::istringstream status(read_small_file(fmt::format("/proc/self/task/{}/status", tid)));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigBlk:", 0) != 0) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (mask >> (signal - 1)) & 1ull;
  }
  return false;
}

std::vector<int> thread_ids() {
  std::vector<int> tids;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') tids.push_back(std::atoi(entry->d_name));
    }
    ::closedir(dir);
  }
  std::sort(tids.begin(), tids.end());
  return tids;
}

// Records thread `tid`'s return addresses (the capture frames left out). Empty `why`: done.
std::vector<void*> capture_thread(int tid, std::string& why) {
  if (g_slot_stuck) {
    why = "not captured: an earlier thread's capture never finished";
    return {};
  }
  while (::sem_trywait(&g_captured) == 0) {
  }
  g_slot.depth = 0;
  g_slot.tid.store(tid);
  g_slot.state.store(slot_requested);
  if (::syscall(SYS_tgkill, ::getpid(), tid, capture_signal()) != 0) {
    g_slot.state.store(slot_idle);
    why = fmt::format("not captured: {}", std::strerror(errno));  // ended meanwhile
    return {};
  }
  timespec deadline{};
  ::clock_gettime(CLOCK_REALTIME, &deadline);
  const long wait_ns = std::chrono::nanoseconds(kThreadAnswerTimeout).count();
  deadline.tv_nsec += wait_ns;
  deadline.tv_sec += deadline.tv_nsec / 1000000000L;
  deadline.tv_nsec %= 1000000000L;
  while (g_slot.state.load() != slot_done) {
    if (::sem_timedwait(&g_captured, &deadline) == 0 || errno == EINTR) continue;
    int expected = slot_requested;
    if (g_slot.state.compare_exchange_strong(expected, slot_abandoned)) {
      why = fmt::format("no answer to the capture signal within {} ms (stuck in the kernel?)",
                        std::chrono::milliseconds(kThreadAnswerTimeout).count());
      return {};
    }
    // Its handler is writing right now: that takes microseconds, unless it is stuck too.
    for (int i = 0; i < 1000 && g_slot.state.load() != slot_done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (g_slot.state.load() != slot_done) {
      g_slot_stuck = true;
      why = "its capture began but never finished";
      return {};
    }
  }
  std::vector<void*> frames;
  for (int i = kHandlerFrames; i < g_slot.depth; ++i) frames.push_back(g_slot.frames[i]);
  g_slot.state.store(slot_idle);
  g_slot.tid.store(0);
  return frames;
}

struct Capture {
  std::string text;
  int threads = 0;
  int stacks = 0;
};

Capture capture_all() {
  State& s = state();
  std::lock_guard<std::mutex> capture_lock(s.capture_mutex);
  std::vector<std::pair<int, std::string>> labels;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    labels = s.labels;
  }
  Capture c;
  const int self = current_tid();
  for (int tid : thread_ids()) {
    std::string name = read_small_file(fmt::format("/proc/self/task/{}/comm", tid));
    while (!name.empty() && name.back() == '\n') name.pop_back();
    std::string label;
    for (const auto& [labeled, text] : labels)
      if (labeled == tid) label += " [" + text + "]";
    ++c.threads;
    c.text += fmt::format("thread {} \"{}\"{}{}:\n", tid, name, label, tid == ::getpid() ? " (main)" : "");
    if (tid == self) {
      c.text += "  (this thread writes the dump)\n";
      continue;
    }
    if (blocks_signal(tid, capture_signal())) {
      c.text += "  no stack: it blocks the capture signal (ZeroMQ's own threads do)\n";
      continue;
    }
    std::string why;
    std::vector<void*> frames = capture_thread(tid, why);
    if (!why.empty()) {
      c.text += "  no stack: " + why + "\n";
      continue;
    }
    ++c.stacks;
    stack_dump_append_frames(frames, c.text);
  }
  return c;
}

std::string running_commands_line() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.commands.empty()) return "running command: none (the executor is idle)\n";
  std::string line = "running command:";
  for (size_t i = 0; i < s.commands.size(); ++i) {
    const RunningCommand& c = s.commands[i];
    line += fmt::format("{} {} (request {}) for {:.2f} s", i ? ", within it" : "", c.name, c.request_id,
                        std::chrono::duration<double>(Clock::now() - c.started).count());
  }
  return line + "\n";
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void write_dump(uint64_t dump_id, const std::string& reason) {
  std::string worker;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    worker = state().worker_name;
  }
  const auto started = Clock::now();
  std::string text = stack_dump_begin_line(worker, dump_id) + "\n";
  text += fmt::format("asked: {}\n", reason);
  text += running_commands_line();
  Capture c = capture_all();
  text += c.text;
  const std::string summary = fmt::format("{} threads, {} stacks", c.threads, c.stacks);
  text += fmt::format("{}{}, in {:.2f} s, by signal handlers{}) ====\n", stack_dump_end_line_start(worker, dump_id),
                      summary, std::chrono::duration<double>(Clock::now() - started).count(),
#if TANDEM_HAVE_LIBBACKTRACE
                      " and libbacktrace"
#else
                      " and dladdr"
#endif
  );
  write_all(STDERR_FILENO, text);
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().written_id = std::max(state().written_id, dump_id);
    state().written_summary = summary;
  }
  post(g_done_fd);
}

[[noreturn]] void dumper_loop() {
  State& s = state();
  while (true) {
    uint64_t count = 0;
    if (::read(g_trigger_fd, &count, sizeof count) != static_cast<ssize_t>(sizeof count)) {
      if (errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    uint64_t dump_id = 0;
    std::string reason;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      const uint64_t signal_id = g_signal_dump_id.load();
      const uint64_t wanted = std::max(s.requested_id, signal_id);
      const bool without_id = g_signal_without_id.exchange(false) || s.requested_without_id;
      const std::string by_signal = fmt::format("by SIGUSR2 from pid {}", g_signal_sender.load());
      if (wanted > s.written_id) {
        dump_id = wanted;
        reason = s.requested_id == wanted ? s.requested_reason : by_signal;
      } else if (without_id) {
        reason = s.requested_without_id ? s.without_id_reason : by_signal;
      } else {
        continue;  // the other trigger of a dump already written
      }
      s.requested_without_id = false;
    }
    try {
      write_dump(dump_id, reason);
    } catch (const std::exception& e) {
      write_all(STDERR_FILENO, fmt::format("stack dump {} failed: {}\n", dump_id, e.what()));
    }
  }
}

}  // namespace

int stack_dump_trigger_signal() { return SIGUSR2; }

std::string stack_dump_begin_line(const std::string& worker_name, uint64_t dump_id) {
  return fmt::format("==== tandem stack dump begin: {} dump {} (pid {}) ====", worker_name, dump_id, ::getpid());
}

std::string stack_dump_end_line_start(const std::string& worker_name, uint64_t dump_id) {
  return fmt::format("==== tandem stack dump end: {} dump {} (", worker_name, dump_id);
}

void stack_dump_install(const std::string& worker_name) {
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().worker_name = worker_name;
  }
  static std::once_flag once;
  std::call_once(once, [] {
    void* warm_up[4];
    (void)::backtrace(warm_up, 4);  // loads libgcc_s's unwinder now, not in a handler
    TANDEM_CHECK(::sem_init(&g_captured, 0, 0) == 0, "stack dump: sem_init: {}", std::strerror(errno));
    g_trigger_fd = ::eventfd(0, EFD_CLOEXEC);
    g_done_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    TANDEM_CHECK(g_trigger_fd >= 0 && g_done_fd >= 0, "stack dump: eventfd: {}", std::strerror(errno));

    struct sigaction capture {};
    capture.sa_handler = capture_handler;
    capture.sa_flags = SA_RESTART;
    ::sigemptyset(&capture.sa_mask);
    TANDEM_CHECK(::sigaction(capture_signal(), &capture, nullptr) == 0, "stack dump: sigaction: {}",
                 std::strerror(errno));
    struct sigaction trigger {};
    trigger.sa_sigaction = trigger_handler;
    trigger.sa_flags = SA_SIGINFO | SA_RESTART;
    ::sigemptyset(&trigger.sa_mask);
    TANDEM_CHECK(::sigaction(stack_dump_trigger_signal(), &trigger, nullptr) == 0, "stack dump: sigaction: {}",
                 std::strerror(errno));
    // Where Yama restricts ptrace to ancestors, let our parent (the controller) and its
    // children attach: its gdb fallback, for when this process cannot answer itself.
    // Without Yama this fails with EINVAL, and nothing needs allowing.
    (void)::prctl(PR_SET_PTRACER, static_cast<unsigned long>(::getppid()), 0, 0, 0);

    std::thread dumper(dumper_loop);
    ::pthread_setname_np(dumper.native_handle(), "stack-dumper");
    dumper.detach();
  });
}

void stack_dump_request(uint64_t dump_id, const std::string& reason) {
  if (g_trigger_fd < 0) {
    log::warn("a stack dump was asked for before stack_dump_install: ignored");
    return;
  }
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (dump_id == 0) {
      state().requested_without_id = true;
      state().without_id_reason = reason;
    } else if (dump_id > state().requested_id) {
      state().requested_id = dump_id;
      state().requested_reason = reason;
    }
  }
  post(g_trigger_fd);
}

int stack_dump_done_fd() { return g_done_fd; }

uint64_t stack_dump_take_done(std::string& summary) {
  uint64_t count = 0;
  if (g_done_fd >= 0) (void)!::read(g_done_fd, &count, sizeof count);
  std::lock_guard<std::mutex> lock(state().mutex);
  summary = state().written_summary;
  return state().written_id;
}

std::string stack_dump_capture_all() {
  TANDEM_CHECK(g_trigger_fd >= 0, "stack_dump_capture_all before stack_dump_install");
  return capture_all().text;
}

StackDumpThreadLabel::StackDumpThreadLabel(const std::string& label) : tid_(current_tid()) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().labels.emplace_back(tid_, label);
}

StackDumpThreadLabel::~StackDumpThreadLabel() {
  std::lock_guard<std::mutex> lock(state().mutex);
  auto& labels = state().labels;
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    if (it->first == tid_) {
      labels.erase(it);
      break;
    }
  }
}

StackDumpRunningCommand::StackDumpRunningCommand(const std::string& name, uint64_t request_id) {
  std::lock_guard<std::mutex> lock(state().mutex);
  token_ = state().next_token++;
  state().commands.push_back({token_, name, request_id, Clock::now()});
}

StackDumpRunningCommand::~StackDumpRunningCommand() {
  std::lock_guard<std::mutex> lock(state().mutex);
  auto& commands = state().commands;
  for (auto it = commands.begin(); it != commands.end(); ++it) {
    if (it->token == token_) {
      commands.erase(it);
      break;
    }
  }
}

}  // namespace tandem
