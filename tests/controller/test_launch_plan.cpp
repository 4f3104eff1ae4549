// The pieces of launching off one machine that need no cluster: control-plane addresses,
// when CURVE is wanted, Slurm placement, the sbatch script and srun command lines.
#include "controller/launch/launch_plan.h"
#include "controller/launch/launcher_slurm.h"
#include "controller/launch/slurm_submit.h"
#include "core/config.h"
#include "core/error.h"
#include "core/net_address.h"
#include "core/files.h"
#include "core/math_environment.h"
#include "core/process.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <thread>

using namespace tandem;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text + "\n").find("\n" + line + "\n") != std::string::npos;
}

Config slurm_config() {
  Config c = load_config_text("experiment: {name: my run}\nlauncher: {kind: slurm}\n", "<test>").config;
  c.launcher.slurm.nodes = 3;
  return c;
}

}  // namespace

TEST_CASE("endpoints: which stay on this host, and the address on the route to a peer") {
  CHECK(endpoint_is_local("ipc:///tmp/x/control.sock"));
  CHECK(endpoint_is_local("tcp://127.0.0.1:5555"));
  CHECK(endpoint_is_local("tcp://localhost:5555"));
  CHECK(endpoint_is_local("tcp://[::1]:5555"));
  CHECK_FALSE(endpoint_is_local("tcp://10.0.0.1:5555"));
  CHECK_FALSE(endpoint_is_local("tcp://0.0.0.0:5555"));
  CHECK(endpoint_host("tcp://10.1.2.3:80") == "10.1.2.3");
  CHECK(endpoint_host("tcp://[fe80::1]:80") == "fe80::1");
  CHECK(endpoint_host("ipc:///x") == "");
  CHECK(local_address_towards("tcp://127.0.0.1:9") == "127.0.0.1");
  CHECK(local_address_towards("ipc:///tmp/x") == "127.0.0.1");
  const int port = free_tcp_port("127.0.0.1");
  CHECK(port > 0);
  CHECK(port < 65536);
  CHECK_THROWS_WITH_AS(free_tcp_port("localhost"), doctest::Contains("not a numeric address"), Error);
  // (No lookup of a real name here: a test sends nothing beyond loopback, DNS included.)
  CHECK_THROWS_WITH_AS(local_address_towards("tcp://:9"), doctest::Contains("not a tcp://HOST:PORT endpoint"), Error);
}

TEST_CASE("CURVE is wanted on every tcp control plane by default (loopback too), always with curve, never with none") {
  CHECK_FALSE(curve_wanted("auto", "ipc:///tmp/x"));
  CHECK(curve_wanted("auto", "tcp://127.0.0.1:*"));
  CHECK(curve_wanted("auto", "tcp://[::1]:5555"));
  CHECK(curve_wanted("auto", "tcp://10.0.0.1:*"));
  CHECK(curve_wanted("auto", "tcp://0.0.0.0:29400"));
  CHECK(curve_wanted("curve", "tcp://127.0.0.1:*"));
  CHECK_FALSE(curve_wanted("none", "tcp://10.0.0.1:*"));
}

TEST_CASE("Slurm placement spreads the run's workers round robin over the nodes") {
  CHECK(place_workers_on_nodes(4, 3) == std::vector<size_t>{0, 1, 2, 0});
  CHECK(place_workers_on_nodes(2, 1) == std::vector<size_t>{0, 0});
  CHECK(place_workers_on_nodes(0, 2).empty());
}

TEST_CASE("srun command line of a worker step") {
  if (find_on_path("srun").empty()) {
    MESSAGE("skipped: srun is not installed (slurm-wlm)");
    return;
  }
  Config c = slurm_config();
  c.learner.device = "cuda";
  c.launcher.slurm.cpus_per_task = 2;
  const SlurmAllocation allocation{"42", {{"n1", "10.0.0.1"}, {"n2", "10.0.0.2"}}};
  const std::vector<std::string> argv =
      srun_argv(allocation, allocation.nodes[1], c, {"learner", 1}, "/runs/x/logs/learner-1.log", {"/bin/tandem", "worker"});
  auto has = [&](const std::string& arg) { return std::count(argv.begin(), argv.end(), arg) == 1; };
  CHECK(argv[0] == find_on_path("srun"));
  for (const char* arg : {"--jobid=42", "--job-name=learner-1", "--nodes=1", "--ntasks=1", "--nodelist=n2", "--exact",
                          "--overlap", "--kill-on-bad-exit=0", "--output=/runs/x/logs/learner-1.log",
                          "--cpus-per-task=2", "--gpus=1"}) {
    CHECK_MESSAGE(has(arg), arg);
  }
  CHECK(argv[argv.size() - 2] == "/bin/tandem");
  CHECK(argv.back() == "worker");
  const std::vector<std::string> rollout =
      srun_argv(allocation, allocation.nodes[0], c, {"rollout", 0}, "/l", {"/bin/tandem", "worker"});
  CHECK(std::count(rollout.begin(), rollout.end(), "--gpus=1") == 0);  // rollout.device: cpu
  // Reward-model workers: ranks numbered over the model rewards with workers, each
  // entry's device deciding its own ranks'.
  RewardConfig on_cpu, on_gpu;
  on_cpu.model = on_gpu.model = "/rm";
  on_cpu.workers = 2;
  on_gpu.workers = 1;
  on_gpu.device = "cuda";
  c.reward = {on_cpu, on_gpu};
  for (const auto& [rank, gpu] : std::vector<std::pair<uint32_t, bool>>{{0, false}, {1, false}, {2, true}}) {
    INFO("reward_model rank " << rank);
    const std::vector<std::string> scorer =
        srun_argv(allocation, allocation.nodes[0], c, {"reward_model", rank}, "/l", {"/bin/tandem", "worker"});
    CHECK(std::count(scorer.begin(), scorer.end(), "--gpus=1") == (gpu ? 1 : 0));
  }
}

TEST_CASE("the sbatch script carries launcher.slurm's options and the resolved config") {
  Config c = slurm_config();
  c.launcher.slurm.partition = "gpu";
  c.launcher.slurm.account = "lab";
  c.launcher.slurm.time = "04:00:00";
  c.launcher.slurm.gpus_per_node = 8;
  c.launcher.slurm.extra_args = "  --qos=high   --exclusive ";
  const SubmitPlan plan = plan_submission(c, "/shared/runs/r1", "/opt/tandem/bin/tandem");
  for (const char* line : {"#!/bin/bash", "#SBATCH --job-name=tandem-my_run", "#SBATCH --nodes=3",
                           "#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --time=04:00:00",
                           "#SBATCH --gpus-per-node=8", "#SBATCH --requeue", "#SBATCH --qos=high",
                           "#SBATCH --exclusive", "#SBATCH --signal=B:TERM@120",
                           "#SBATCH --output=/shared/runs/r1/slurm-%j.out", "run_dir='/shared/runs/r1'",
                           "tandem='/opt/tandem/bin/tandem'"}) {
    CHECK_MESSAGE(has_line(plan.script, line), line);
  }
  CHECK(plan.script.find(plan.config_yaml) != std::string::npos);
  CHECK(load_config_text(plan.config_yaml, "<script>").config.launcher.slurm.nodes == 3);

  c.launcher.slurm.requeue = false;
  c.launcher.slurm.partition.clear();
  const std::string plain = plan_submission(c, "/r", "/t").script;
  CHECK(has_line(plain, "#SBATCH --no-requeue"));
  CHECK(plain.find("--partition") == std::string::npos);
}

TEST_CASE("sbatch --parsable output gives the job id") {
  CHECK(parse_sbatch_job_id("1234\n") == "1234");
  CHECK(parse_sbatch_job_id("77;cluster1\n") == "77");
  CHECK_THROWS_WITH_AS(parse_sbatch_job_id("sbatch: error: Batch job submission failed\n"),
                       doctest::Contains("did not print a job id"), Error);
}

TEST_CASE("a synchronous local run's learners compute alone; asynchronous, Slurm or oversubscribed ones do not") {
  const auto config = [](const std::string& yaml) { return load_config_text(yaml, "<test>").config; };
  const std::set<std::string> learners = {"learner", "colocated"};
  CHECK(roles_computing_alone(config("experiment: {name: r}\n")) == learners);
  CHECK(roles_computing_alone(config("experiment: {name: r}\nplacement: disaggregated\n")) == learners);
  CHECK(roles_computing_alone(config("experiment: {name: r}\nplacement: disaggregated\nalgorithm: {async: {max_staleness: 1}}\n"))
            .empty());
  CHECK(roles_computing_alone(slurm_config()).empty());
  const int64_t cores = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  Config c = config("experiment: {name: r}\n");
  c.learner.threads = cores;
  CHECK(roles_computing_alone(c) == learners);
  c.learner.threads = cores + 1;  // one rank's threads outnumber the cores
  CHECK(roles_computing_alone(c).empty());
  c.learner.threads = 0;          // 0: the cores shared out between the ranks (one each at least)
  c.learner.workers = 2;
  CHECK(roles_computing_alone(c) == (cores >= 2 ? learners : std::set<std::string>{}));
  c.learner.threads = cores;      // two ranks with every core each
  CHECK(roles_computing_alone(c).empty());
}

namespace {

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedVariable() { old_ ? ::setenv(name_.c_str(), old_->c_str(), 1) : ::unsetenv(name_.c_str()); }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

bool contains(const std::vector<std::string>& settings, const std::string& setting) {
  return std::find(settings.begin(), settings.end(), setting) != settings.end();
}

bool names(const std::vector<std::string>& settings, const std::string& name) {
  return std::any_of(settings.begin(), settings.end(),
                     [&](const std::string& s) { return s.rfind(name + "=", 0) == 0; });
}

}  // namespace

TEST_CASE("the math environment: passive OpenMP waits, a brief spin for a process computing alone, the user's choice kept") {
  const std::string spin = "GOMP_SPINCOUNT=" + std::to_string(kOpenMpSpins);
  {
    ScopedVariable policy("OMP_WAIT_POLICY", nullptr), count("GOMP_SPINCOUNT", nullptr);
    CHECK(contains(missing_math_environment(), "OMP_WAIT_POLICY=PASSIVE"));
    CHECK_FALSE(names(missing_math_environment(), "GOMP_SPINCOUNT"));
    CHECK(contains(missing_math_environment(true), "OMP_WAIT_POLICY=PASSIVE"));
    CHECK(contains(missing_math_environment(true), spin));
  }
  {  // a wait policy the user set: neither variable is added
    ScopedVariable policy("OMP_WAIT_POLICY", "ACTIVE"), count("GOMP_SPINCOUNT", nullptr);
    CHECK_FALSE(names(missing_math_environment(true), "OMP_WAIT_POLICY"));
    CHECK_FALSE(names(missing_math_environment(true), "GOMP_SPINCOUNT"));
  }
  {  // a spin count the user set is not replaced
    ScopedVariable policy("OMP_WAIT_POLICY", nullptr), count("GOMP_SPINCOUNT", "5");
    CHECK(contains(missing_math_environment(true), "OMP_WAIT_POLICY=PASSIVE"));
    CHECK_FALSE(names(missing_math_environment(true), "GOMP_SPINCOUNT"));
  }
}

TEST_CASE("the local launcher gives a worker computing alone the spin count, and others only the passive policy") {
  ScopedVariable policy("OMP_WAIT_POLICY", nullptr), count("GOMP_SPINCOUNT", nullptr);
  TempDir dir("tandem-launch-env-");
  // A stand-in for the tandem binary: prints the OpenMP variables it was started with.
  const std::string binary = dir.path() + "/fake-tandem";
  {
    std::ofstream script(binary);
    script << "#!/bin/sh\necho \"policy=${OMP_WAIT_POLICY-unset} spins=${GOMP_SPINCOUNT-unset}\"\n";
  }
  REQUIRE(::chmod(binary.c_str(), 0755) == 0);
  std::unique_ptr<Launcher> launcher = make_local_launcher(binary);
  const auto started_with = [&](bool computes_alone, uint32_t rank) {
    LaunchRequest request;
    request.id = {"learner", rank};
    request.controller_address = "ipc:///nonexistent";
    request.log_path = dir.path() + "/worker-" + std::to_string(rank) + ".log";
    request.computes_alone = computes_alone;
    REQUIRE(launcher->launch(request) > 0);
    for (int waited_ms = 0; waited_ms < 10000; waited_ms += 10) {
      const auto ended = launcher->reap();
      if (!ended.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::ifstream log(request.log_path);
    std::string line;
    std::getline(log, line);
    return line;
  };
  CHECK(started_with(true, 0) == "policy=PASSIVE spins=" + std::to_string(kOpenMpSpins));
  CHECK(started_with(false, 1) == "policy=PASSIVE spins=unset");
}
