// The controller and real worker processes on loopback: registration, request/reply
// rounds, and every way a worker can go wrong (killed, crashed, stopped, never
// registering, lost controller), each detected, named, and leaving no process behind.
#include "controller/workers/worker_pool.h"
#include "core/worker_runtime.h"
#include "core/command_codec.h"
#include "core/worker_commands.capnp.h"
#include "core/files.h"
#include "core/log.h"
#include "core/process.h"
#include "learner/learner_commands.capnp.h"

#include <doctest/doctest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <filesystem>
#include <random>
#include <thread>

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

SpawnOptions log_to(const std::string& path) {
  SpawnOptions options;
  options.output_path = path;
  return options;
}

PoolOptions fast_options(const std::string& dir) {
  PoolOptions o;
  o.bind_address = "tcp://127.0.0.1:*";
  o.log_dir = dir;
  o.register_timeout_s = 20;
  o.heartbeat_interval_s = 0.1;
  o.heartbeat_timeout_s = 1.0;
  o.command_timeout_s = 20;
  o.shutdown_grace_s = 2;
  return o;
}

std::vector<WorkerId> four_workers() {
  return {{"rollout", 0}, {"rollout", 1}, {"learner", 0}, {"learner", 1}};
}

void expect_all_gone(const std::vector<WorkerStatus>& workers) {
  for (const auto& w : workers) CHECK_MESSAGE(!process_alive(w.pid), w.id.name(), " (pid ", w.pid, ") still runs");
}

int pid_of(WorkerPool& pool, const WorkerId& id) {
  for (const auto& w : pool.status())
    if (w.id == id) return w.pid;
  FAIL("no such worker");
  return 0;
}

// Runs ping rounds until one throws; returns the failure and how long detection took.
WorkerFailure ping_until_failure(WorkerPool& pool, double limit_s, double& took_s) {
  auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < limit_s) {
    try {
      pool.call_all("ping", "x");
    } catch (const WorkerFailure& f) {
      took_s = std::chrono::duration<double>(Clock::now() - start).count();
      return f;
    }
  }
  FAIL("no failure detected within ", limit_s, " s");
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("four workers register, answer request/reply rounds and shut down") {
  TempDir temp;
  const std::string& dir = temp.path();
  std::vector<WorkerStatus> seen;
  {
    WorkerPool pool(fast_options(dir), make_local_launcher(TANDEM_BINARY));
    pool.start(four_workers());
    std::mt19937_64 rng(std::random_device{}());
    for (int round = 0; round < 50; ++round) {
      std::vector<uint64_t> ids;
      std::vector<std::pair<std::string, std::string>> sent;
      for (const auto& w : pool.status()) {
        std::string body(rng() % 2000, '\0');
        for (auto& c : body) c = static_cast<char>(rng() & 0xff);
        std::string attachment(rng() % 100000, 'a' + static_cast<char>(round % 26));
        ids.push_back(pool.send(w.id, "ping", body, {attachment}));
        sent.emplace_back(body, attachment);
      }
      auto replies = pool.wait(ids);
      for (size_t i = 0; i < ids.size(); ++i) {
        const CommandReply& r = replies.at(ids[i]);
        CHECK(r.reply.body == sent[i].first);
        REQUIRE(r.attachments.size() == 1);
        CHECK(r.attachments[0] == sent[i].second);
      }
    }
    auto described = pool.call_all("describe");
    std::vector<WorkerStatus> workers = pool.status();
    for (size_t i = 0; i < described.size(); ++i) {
      const WorkerStatus& w = workers[i];
      CHECK(described[i].reply.worker == w.id);
      const Body<wire::DescribeReply> body(described[i].reply.body, "describe reply");
      CHECK(body->getPid() == static_cast<uint32_t>(w.pid));
      CHECK(to_string(body->getRole()) == w.id.role);
      CHECK(body->getRank() == static_cast<uint32_t>(w.id.rank));
    }
    uint64_t torch = pool.send({"learner", 1}, "torch_info");
    const Body<wire::TorchInfo> info(pool.wait({torch}).at(torch).reply.body, "torch_info reply");
    CHECK(to_string(info->getLibtorch()).size() > 0);
    CHECK(pool.rejected_messages() == 0);
    seen = pool.status();
    pool.shutdown("test done");
    for (const auto& w : pool.status()) CHECK(w.state == WorkerState::stopped);
  }
  expect_all_gone(seen);
}

TEST_CASE("a command that fails on a worker is reported with the worker and the command") {
  TempDir temp;
  const std::string& dir = temp.path();
  WorkerPool pool(fast_options(dir), make_local_launcher(TANDEM_BINARY));
  pool.start({{"rollout", 0}});
  uint64_t id = pool.send({"rollout", 0}, "no_such_command");
  try {
    pool.wait({id});
    FAIL("no error");
  } catch (const WorkerFailure& f) {
    CHECK(f.worker() == WorkerId{"rollout", 0});
    std::string what = f.what();
    CHECK(what.find("worker rollout-0 (role rollout, rank 0, pid") == 0);
    CHECK(what.find("failed command \"no_such_command\"") != std::string::npos);
    CHECK(what.find("unknown command") != std::string::npos);
  }
  // A failed request stays known (waiting again repeats the error) until it is forgotten.
  CHECK(pool.has_request(id));
  CHECK_THROWS_AS(pool.wait({id}), WorkerFailure);
  pool.forget(id);
  CHECK_FALSE(pool.has_request(id));
  CHECK_THROWS_WITH_AS(pool.wait({id}), doctest::Contains("is unknown"), Error);
  CHECK(pool.call_all("ping", "still alive")[0].reply.body == "still alive");
  pool.shutdown("test done");
}

TEST_CASE("a worker killed with SIGKILL is detected and named") {
  TempDir temp;
  const std::string& dir = temp.path();
  std::vector<WorkerStatus> seen;
  {
    WorkerPool pool(fast_options(dir), make_local_launcher(TANDEM_BINARY));
    pool.start(four_workers());
    seen = pool.status();
    int victim = pid_of(pool, {"learner", 1});
    REQUIRE(::kill(victim, SIGKILL) == 0);
    double took = 0;
    WorkerFailure f = ping_until_failure(pool, 10, took);
    CHECK(f.worker() == WorkerId{"learner", 1});
    CHECK(f.pid() == victim);
    CHECK(f.reason() == "died: killed by signal 9 (SIGKILL)");
    CHECK(std::string(f.what()).find(dir + "/learner-1.log") != std::string::npos);
    CHECK(took < 5.0);
    pool.shutdown("test done");
  }
  expect_all_gone(seen);
}

TEST_CASE("a worker that crashes is detected with its signal") {
  TempDir temp;
  const std::string& dir = temp.path();
  WorkerPool pool(fast_options(dir), make_local_launcher(TANDEM_BINARY));
  pool.start({{"rollout", 0}, {"rollout", 1}});
  ::kill(pid_of(pool, {"rollout", 0}), SIGSEGV);
  double took = 0;
  WorkerFailure f = ping_until_failure(pool, 10, took);
  CHECK(f.worker() == WorkerId{"rollout", 0});
  CHECK(f.reason() == "died: killed by signal 11 (SIGSEGV)");
  pool.shutdown("test done");
}

TEST_CASE("a stopped (hung) worker is detected by its missing heartbeats and removed") {
  TempDir temp;
  const std::string& dir = temp.path();
  std::vector<WorkerStatus> seen;
  {
    WorkerPool pool(fast_options(dir), make_local_launcher(TANDEM_BINARY));
    pool.start(four_workers());
    seen = pool.status();
    int victim = pid_of(pool, {"rollout", 1});
    REQUIRE(::kill(victim, SIGSTOP) == 0);
    double took = 0;
    WorkerFailure f = ping_until_failure(pool, 10, took);
    CHECK(f.worker() == WorkerId{"rollout", 1});
    CHECK(f.reason().find("is hung: no heartbeat for") == 0);
    CHECK(took >= 0.9);  // not before the 1 s timeout
    CHECK(took < 5.0);
    pool.shutdown("test done");
  }
  expect_all_gone(seen);
}

TEST_CASE("a worker that cannot start is reported with its exit status") {
  TempDir temp;
  const std::string& dir = temp.path();
  WorkerPool pool(fast_options(dir), make_local_launcher("/nonexistent/tandem"));
  try {
    pool.start({{"rollout", 0}});
    FAIL("started");
  } catch (const WorkerFailure& f) {
    CHECK(f.reason() == "died before registering: exited with status 127");
  }
}

namespace {

// Starts processes that never register, to test the registration timeout.
class SilentLauncher : public Launcher {
 public:
  int launch(const LaunchRequest& r) override {
    children_.push_back(ChildProcess::spawn({"/bin/sleep", "60"}));
    ids_.push_back(r.id);
    return children_.back().pid();
  }
  std::vector<std::pair<WorkerId, ExitStatus>> reap() override { return {}; }
  void send_signal(const WorkerId& id, int signal) override {
    for (size_t i = 0; i < ids_.size(); ++i)
      if (ids_[i] == id) children_[i].send_signal(signal);
  }
  void stop_all(double) override {
    for (auto& c : children_) c.kill_and_reap();
  }
  std::vector<int> pids() const {
    std::vector<int> p;
    for (auto& c : children_) p.push_back(c.pid());
    return p;
  }

 private:
  std::vector<ChildProcess> children_;
  std::vector<WorkerId> ids_;
};

}  // namespace

TEST_CASE("workers that never register time out with a clear error") {
  TempDir temp;
  const std::string& dir = temp.path();
  PoolOptions options = fast_options(dir);
  options.register_timeout_s = 0.5;
  auto launcher = std::make_unique<SilentLauncher>();
  SilentLauncher* raw = launcher.get();
  std::vector<int> pids;
  {
    WorkerPool pool(options, std::move(launcher));
    try {
      pool.start({{"learner", 0}});
      FAIL("started");
    } catch (const WorkerFailure& f) {
      CHECK(f.reason() == "did not register within 0.5 s (launcher.register_timeout_s)");
    }
    pids = raw->pids();
  }
  for (int pid : pids) CHECK(!process_alive(pid));
}

TEST_CASE("unknown senders and forged registrations are rejected; the pool goes on") {
  TempDir temp;
  const std::string& dir = temp.path();
  WorkerPool pool(fast_options(dir), make_local_launcher(TANDEM_BINARY));
  pool.start({{"rollout", 0}});
  zmq::context_t context(1);
  Channel intruder(context, Channel::Kind::dealer);
  intruder.connect(pool.address());
  intruder.send(HeartbeatMsg{WorkerId{"rollout", 0}, 1});                     // never registered
  intruder.send(RegisterMsg{WorkerId{"rollout", 0}, 1, "h", protocol_version(), "127.0.0.1"});  // already registered
  intruder.send(RegisterMsg{WorkerId{"rollout", 9}, 1, "h", protocol_version(), "127.0.0.1"});  // not a worker of ours
  intruder.send(ReplyMsg{42, WorkerId{"rollout", 0}, "forged", {}});
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(pool.address());
  raw.send(zmq::str_buffer("garbage!"), zmq::send_flags::none);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (pool.rejected_messages() < 5 && Clock::now() < deadline) pool.poll_events(0.05);
  CHECK(pool.rejected_messages() == 5);
  CHECK(pool.call_all("ping", "fine")[0].reply.body == "fine");
  CHECK_FALSE(pool.first_failure().has_value());
  pool.shutdown("test done");
}

TEST_CASE("a forged registration with a wrong protocol version during a restart fails no worker") {
  TempDir temp;
  const std::string& dir = temp.path();
  WorkerPool pool(fast_options(dir), make_local_launcher(TANDEM_BINARY));
  pool.start({{"rollout", 0}});
  zmq::context_t context(1);
  std::atomic<bool> done{false};
  // A stranger claiming to be rollout-0 the whole time it restarts (pid 1 is not the
  // process the launcher started).
  std::thread forger([&] {
    Channel intruder(context, Channel::Kind::dealer);
    intruder.connect(pool.address());
    while (!done) {
      intruder.send(RegisterMsg{WorkerId{"rollout", 0}, 1, "h", 99, "127.0.0.1"});
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  CHECK_NOTHROW(pool.restart({"rollout", 0}));
  done = true;
  forger.join();
  CHECK(pool.call_all("ping", "fine")[0].reply.body == "fine");
  CHECK_FALSE(pool.first_failure().has_value());
  pool.shutdown("test done");
}

TEST_CASE("thousands of garbage frames are logged as a few lines and a summary, not a line each") {
  TempDir temp;
  const std::string& dir = temp.path();
  log::Options log_options;
  log_options.file_path = dir + "/pool.log";
  log_options.console = false;
  log::init(log_options);
  WorkerPool pool(fast_options(dir), make_local_launcher(TANDEM_BINARY));
  pool.start({{"rollout", 0}});
  zmq::context_t context(1);
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(pool.address());
  for (int i = 0; i < 5000; ++i) raw.send(zmq::str_buffer("garbage!"), zmq::send_flags::none);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (pool.rejected_messages() < 5000 && Clock::now() < deadline) pool.poll_events(0.05);
  CHECK(pool.rejected_messages() == 5000);
  pool.shutdown("test done");
  log::init(log::Options{});  // back to the console
  int lines = 0;
  std::ifstream in(dir + "/pool.log");
  for (std::string line; std::getline(in, line);) lines += line.find("control channel") != std::string::npos;
  // 5 in full, then at most one summary per 10 s of the test.
  CHECK(lines >= 5);
  CHECK(lines <= 10);
}

TEST_CASE("CURVE: the run's workers get in with their keys; wrong, unkeyed and forged peers are refused") {
  TempDir temp;
  const std::string& dir = temp.path();
  PoolOptions options = fast_options(dir);
  options.heartbeat_timeout_s = 5;  // the test pauses its pumping now and then: no false deaths under load
  const std::vector<WorkerId> workers = {{"rollout", 0}, {"learner", 0}};
  options.keys = prepare_run_keys(dir + "/keys", {"rollout-0", "learner-0"});
  WorkerPool pool(options, make_local_launcher(TANDEM_BINARY));
  pool.start(workers);  // the local launcher hands each worker its key file's path
  CHECK(pool.call_all("ping", "keyed")[0].reply.body == "keyed");
  CHECK(pool.worker_status({"rollout", 0}).address == "127.0.0.1");

  // A worker process whose key pair is not one of the run's: it never gets in.
  CurveKeys stranger{generate_curve_key_pair(), options.keys->controller.own.public_key};
  {
    std::ofstream(dir + "/stranger.key") << curve_key_file_text(stranger);
  }
  std::filesystem::permissions(dir + "/stranger.key", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  ChildProcess rogue = ChildProcess::spawn({TANDEM_BINARY, "worker", "--role", "rollout", "--rank", "0", "--controller",
                                            pool.address(), "--heartbeat-interval", "0.1", "--controller-timeout", "1",
                                            "--keys", dir + "/stranger.key"},
                                           log_to(dir + "/rogue.log"));
  // An unkeyed peer: a plain DEALER speaking no CURVE at all.
  zmq::context_t context(1);
  Channel unkeyed(context, Channel::Kind::dealer);
  unkeyed.connect(pool.address());
  unkeyed.send(RegisterMsg{WorkerId{"rollout", 0}, 1, "h", protocol_version(), "127.0.0.1"});
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (pool.refused_connections() < 2 && Clock::now() < deadline) pool.poll_events(0.05);
  CHECK(pool.refused_connections() >= 2);
  // The rogue exits once it sees its key refused; the pool keeps its own workers' heartbeats going.
  std::optional<ExitStatus> rogue_status;
  deadline = Clock::now() + std::chrono::seconds(10);
  while (!(rogue_status = rogue.poll()) && Clock::now() < deadline) pool.poll_events(0.05);
  REQUIRE_MESSAGE(rogue_status.has_value(), read_file(dir + "/rogue.log").value_or("(no log)"));
  CHECK(rogue_status->exit_code == 1);
  CHECK(read_file(dir + "/rogue.log").value_or("").find("refused this worker's CURVE key") != std::string::npos);

  // A keyed peer (learner-0's key) registering as another worker: refused by name.
  CurveKeys learner_keys = read_curve_key_file(options.keys->worker_key_path("learner-0"));
  ChannelOptions forged_options;
  forged_options.curve = learner_keys;
  Channel forger(context, Channel::Kind::dealer, forged_options);
  forger.connect(pool.address());
  const uint64_t rejected_before = pool.rejected_messages();
  forger.send(RegisterMsg{WorkerId{"rollout", 1}, 1, "h", protocol_version(), "127.0.0.1"});
  forger.send(HeartbeatMsg{WorkerId{"rollout", 0}, 1});
  deadline = Clock::now() + std::chrono::seconds(5);
  while (pool.rejected_messages() < rejected_before + 2 && Clock::now() < deadline) pool.poll_events(0.05);
  CHECK(pool.rejected_messages() == rejected_before + 2);
  CHECK(pool.call_all("ping", "still fine")[1].reply.body == "still fine");
  CHECK_FALSE(pool.first_failure().has_value());
  pool.shutdown("test done");
}

TEST_CASE("CURVE: a registration keyed as one worker but naming another is refused") {
  TempDir temp;
  const std::string& dir = temp.path();
  PoolOptions options = fast_options(dir);
  options.register_timeout_s = 1.0;
  options.keys = prepare_run_keys(dir + "/keys", {"rollout-0", "learner-0"});
  auto launcher = std::make_unique<SilentLauncher>();
  WorkerPool pool(options, std::move(launcher));
  zmq::context_t context(1);
  ChannelOptions keyed;
  keyed.curve = read_curve_key_file(options.keys->worker_key_path("learner-0"));
  Channel impostor(context, Channel::Kind::dealer, keyed);
  impostor.connect(pool.address());
  impostor.send(RegisterMsg{WorkerId{"rollout", 0}, 0, "h", protocol_version(), "127.0.0.1"});
  try {
    pool.start({{"rollout", 0}});
    FAIL("the impostor was admitted as rollout-0");
  } catch (const WorkerFailure& f) {
    CHECK(f.reason() == "did not register within 1 s (launcher.register_timeout_s)");
  }
  CHECK(pool.rejected_messages() >= 1);
}

TEST_CASE("a worker exits by itself when its controller is gone") {
  TempDir temp;
  const std::string& dir = temp.path();
  zmq::context_t context(1);
  Channel fake_controller(context, Channel::Kind::router);
  std::string address = fake_controller.bind("tcp://127.0.0.1:*");
  ChildProcess worker = ChildProcess::spawn({TANDEM_BINARY, "worker", "--role", "rollout", "--rank", "0", "--controller",
                                             address, "--heartbeat-interval", "0.1", "--controller-timeout", "1"},
                                            log_to(dir + "/worker.log"));
  auto registered = fake_controller.receive(10000);
  REQUIRE(registered.has_value());
  CHECK(std::holds_alternative<RegisterMsg>(registered->message));
  // The fake controller never sends a heartbeat: the worker must give up after ~1 s, with
  // the exit status that tells its controller (had it only been paused) why.
  auto status = worker.wait_for(10);
  REQUIRE(status.has_value());
  CHECK(status->exit_code == kExitLostController);
}
