#include "controller/launch/launch_plan.h"

#include "controller/launch/launcher_slurm.h"
#include "core/config.h"
#include "core/error.h"
#include "core/net_address.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

namespace tandem {
namespace {

std::string tcp_endpoint(const std::string& host, int64_t port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return fmt::format("tcp://{}:{}", ipv6 ? "[" + host + "]" : host, port > 0 ? std::to_string(port) : "*");
}

}  // namespace

int64_t host_cores() { return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency())); }

int64_t learner_threads_per_rank(const Config& c) {
  return c.learner.threads > 0 ? c.learner.threads
                               : std::max<int64_t>(1, host_cores() / std::max<int64_t>(1, c.learner.workers));
}

std::set<std::string> roles_computing_alone(const Config& c) {
  // Asynchronous: rollout generates while the learners train, on the same cores when local.
  // Elsewhere (Slurm, external): other jobs' processes may share the cores.
  if (c.launcher.kind != "local" || c.algorithm.async.max_staleness > 0) return {};
  // The ranks' own threads must not outnumber the cores.
  if (learner_threads_per_rank(c) * std::max<int64_t>(1, c.learner.workers) > host_cores()) return {};
  return {"learner", "colocated"};
}

bool curve_wanted(const std::string& auth, const std::string& bind_address) {
  // Any tcp endpoint, loopback included: another user of the host can reach 127.0.0.1
  // too. The ipc default lives in a private 0700 directory instead.
  return auth == "curve" || (auth == "auto" && bind_address.rfind("tcp://", 0) == 0);
}

LaunchPlan plan_launch(const Config& c, const std::string& run_dir, const std::string& socket_dir,
                       const std::vector<WorkerId>& workers) {
  const LauncherConfig& l = c.launcher;
  LaunchPlan plan;
  plan.pool = pool_options_from_config(l, run_dir + "/logs", socket_dir);
  plan.pool.roles_computing_alone = roles_computing_alone(c);
  if (l.kind == "local") {
    if (!l.host.empty()) plan.pool.bind_address = tcp_endpoint(l.host, l.port);
    plan.launcher = make_local_launcher(current_executable());
  } else if (l.kind == "slurm") {
    SlurmAllocation allocation = current_slurm_allocation();  // UsageError outside one
    const std::string host = l.host.empty() ? allocation.nodes.front().address : l.host;
    plan.pool.bind_address = tcp_endpoint(host, l.port);
    plan.launcher = make_slurm_launcher(current_executable(), std::move(allocation), c);
  } else {  // external, kubernetes: workers are started elsewhere and dial launcher.port
    plan.pool.bind_address = tcp_endpoint(l.host.empty() ? "0.0.0.0" : l.host, l.port);
    plan.pool.advertised_address = tcp_endpoint(l.host.empty() ? this_hostname() : l.host, l.port);
    plan.launcher = make_external_launcher(current_executable(), run_dir + "/workers.txt");
  }
  const bool curve = curve_wanted(l.auth, plan.pool.bind_address);
  if (curve) {
    std::vector<std::string> names;
    for (const WorkerId& id : workers) names.push_back(id.name());
    plan.pool.keys = prepare_run_keys(run_dir + "/keys", names);
  }
  plan.description = fmt::format("launcher {}, control plane {} ({})", l.kind, plan.pool.bind_address,
                                 curve ? "CURVE, keys in " + run_dir + "/keys" : "no authentication");
  return plan;
}

}  // namespace tandem
