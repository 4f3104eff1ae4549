// Kubernetes: pod index -> controller or worker, DNS names, Kubernetes names from
// experiment.name, and the rendered objects read back with yaml-cpp field by field.
// (tests/k8s/test_k8s_render.sh runs the real binary through kubectl kustomize and a
// schema validator; this test holds the values.)
#include "controller/launch/k8s_discovery.h"
#include "controller/launch/k8s_render.h"
#include "core/config.h"
#include "core/config_error.h"

#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace tandem;

namespace {

const std::string kubernetes_yaml = R"(
experiment: {name: "GRPO Addition_v2"}
placement: disaggregated
rollout: {workers: 2}
learner: {workers: 1}
launcher:
  kind: kubernetes
  port: 29500
  max_restarts: 3
  kubernetes: {namespace: ml, run_dir_claim: tandem-runs}
)";

LoadedConfig load(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return load_config_text(yaml, "k8s.yaml", overrides);
}

// training_workers() of kubernetes_yaml (disaggregated: rollout ranks, then learner ranks).
const std::vector<WorkerId> disaggregated = {{"rollout", 0}, {"rollout", 1}, {"learner", 0}};

std::vector<std::string> problems(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return k8s_config_problems(load(yaml, overrides), disaggregated);
}

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

const std::string& document(const K8sManifests& m, const std::string& file) {
  for (const auto& [name, text] : m.files) {
    if (name == file) return text;
  }
  FAIL("no ", file);
  static const std::string none;
  return none;
}

}  // namespace

TEST_CASE("Kubernetes names come from experiment.name as DNS labels") {
  Config c;
  c.experiment.name = "GRPO Addition_v2";
  CHECK(k8s_job_name(c, 3) == "grpo-addition-v2");
  c.experiment.name = "--Qwen3..0.6B--";
  CHECK(k8s_job_name(c, 3) == "qwen3-0-6b");
  c.experiment.name = "2024 sweep";
  CHECK(k8s_job_name(c, 3) == "tandem-2024-sweep");  // a Service name starts with a letter

  // Long names are cut so that the last pod's hostname "<name>-<index>" is a DNS label.
  c.experiment.name = std::string(40, 'a') + "-" + std::string(40, 'b');
  for (size_t workers : {size_t{3}, size_t{12}, size_t{150}}) {
    const std::string name = k8s_job_name(c, workers);
    CHECK(k8s_is_dns_label(name));
    CHECK(k8s_is_dns_label(name + "-" + std::to_string(workers)));
    CHECK(name.size() + 1 + std::to_string(workers).size() == 63);
  }
  c.experiment.name = std::string(61, 'a') + "-b";  // cut at the '-': never ends with one
  CHECK(k8s_job_name(c, 5) == std::string(61, 'a'));

  for (const char* hopeless : {"___", "", "日本語"}) {
    c.experiment.name = hopeless;
    CHECK_THROWS_WITH_AS(k8s_job_name(c, 3), doctest::Contains("experiment.name"), UsageError);
  }
}

TEST_CASE("DNS label and subdomain checks") {
  CHECK(k8s_is_dns_label("ml"));
  CHECK(k8s_is_dns_label("a-0"));
  CHECK(k8s_is_dns_label(std::string(63, 'x')));
  CHECK_FALSE(k8s_is_dns_label(std::string(64, 'x')));
  CHECK_FALSE(k8s_is_dns_label(""));
  CHECK_FALSE(k8s_is_dns_label("-a"));
  CHECK_FALSE(k8s_is_dns_label("a-"));
  CHECK_FALSE(k8s_is_dns_label("Ml"));
  CHECK_FALSE(k8s_is_dns_label("a.b"));
  CHECK(k8s_is_dns_subdomain("a.b-c.d"));
  CHECK_FALSE(k8s_is_dns_subdomain("a..b"));
  CHECK_FALSE(k8s_is_dns_subdomain("a_b"));
}

TEST_CASE("pod 0 is the controller, pod i the i-th worker") {
  CHECK(k8s_pod_count(disaggregated) == 4);
  const K8sPodRole controller = k8s_pod_role(disaggregated, 0);
  CHECK(controller.controller);
  for (int64_t i = 1; i < 4; ++i) {
    const K8sPodRole pod = k8s_pod_role(disaggregated, i);
    CHECK_FALSE(pod.controller);
    CHECK(pod.index == i);
    CHECK(pod.worker == disaggregated[static_cast<size_t>(i - 1)]);
  }
  CHECK_THROWS_WITH_AS(k8s_pod_role(disaggregated, 4), doctest::Contains("out of range"), UsageError);
  CHECK_THROWS_AS(k8s_pod_role(disaggregated, -1), UsageError);
}

TEST_CASE("JOB_COMPLETION_INDEX: parsed, or a clear error") {
  CHECK(k8s_completion_index("0", 4) == 0);
  CHECK(k8s_completion_index("3", 4) == 3);
  CHECK_THROWS_WITH_AS(k8s_completion_index(nullptr, 4), doctest::Contains("JOB_COMPLETION_INDEX is not set"), UsageError);
  for (const char* bad : {"", "-1", "1x", " 1", "0x1", "99999999999999999999"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(k8s_completion_index(bad, 4), doctest::Contains("is not a pod index"), UsageError);
  }
  CHECK_THROWS_WITH_AS(k8s_completion_index("4", 4), doctest::Contains("out of range: this config runs 4 pods"),
                       UsageError);
}

TEST_CASE("pods' DNS names, the controller's address and a worker's command line") {
  const Config c = load(kubernetes_yaml).config;
  CHECK(k8s_pod_hostname(c, disaggregated, 2) == "grpo-addition-v2-2");
  CHECK(k8s_pod_dns_name(c, disaggregated, 0) == "grpo-addition-v2-0.grpo-addition-v2.ml.svc");
  CHECK(k8s_controller_address(c, disaggregated) == "tcp://grpo-addition-v2-0.grpo-addition-v2.ml.svc:29500");

  const std::vector<std::string> command =
      k8s_worker_command(c, disaggregated, WorkerId{"learner", 0}, "/run/tandem/r");
  const std::vector<std::string> expected = {
      "worker", "--role", "learner", "--rank", "0", "--controller",
      "tcp://grpo-addition-v2-0.grpo-addition-v2.ml.svc:29500", "--keys", "/run/tandem/r/keys/learner-0.key",
      "--log-file", "/run/tandem/r/logs/learner-0.log", "--log-level", "info", "--heartbeat-interval", "0.5",
      "--controller-timeout", "10", "--max-message-bytes", "67108864"};
  CHECK(command == expected);
  // auth: none: no key file.
  const Config plain = load(kubernetes_yaml, {"launcher.auth=none"}).config;
  const std::vector<std::string> no_keys = k8s_worker_command(plain, disaggregated, WorkerId{"rollout", 1}, "/r");
  CHECK(std::find(no_keys.begin(), no_keys.end(), "--keys") == no_keys.end());
}

TEST_CASE("the run directory lives on the shared volume") {
  CHECK(k8s_pod_run_dir("my-run") == "/run/tandem/my-run");
  CHECK(k8s_pod_run_dir("team/a/") == "/run/tandem/team/a");
  CHECK(k8s_pod_run_dir("/run/tandem/x") == "/run/tandem/x");
  for (const char* bad : {"", ".", "../x", "a/../../x", "/tmp/x", "/run/tandem", "/run/tandem/../x"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(k8s_pod_run_dir(bad), UsageError);
  }
}

TEST_CASE("render refuses what Kubernetes cannot run, naming the key") {
  CHECK(problems(kubernetes_yaml).empty());
  CHECK(any_contains(problems(kubernetes_yaml, {"launcher.kind=local"}), "launcher.kind: is local"));
  CHECK(any_contains(problems(kubernetes_yaml, {"launcher.kubernetes.run_dir_claim=\"\""}),
                     "launcher.kubernetes.run_dir_claim: every pod needs the run directory"));
  CHECK(any_contains(problems(kubernetes_yaml, {"launcher.kubernetes.host_path=/srv/runs"}), "not both"));
  CHECK(problems(kubernetes_yaml, {"launcher.kubernetes.run_dir_claim=\"\"", "launcher.kubernetes.host_path=/srv/runs"})
            .empty());
  CHECK(any_contains(
      problems(kubernetes_yaml, {"launcher.kubernetes.run_dir_claim=\"\"", "launcher.kubernetes.host_path=srv/runs"}),
      "not an absolute path"));
  CHECK(any_contains(problems(kubernetes_yaml, {"launcher.kubernetes.run_dir_claim=Runs"}), "PersistentVolumeClaim"));
  CHECK(any_contains(problems(kubernetes_yaml, {"launcher.kubernetes.namespace=ML_team"}),
                     "launcher.kubernetes.namespace: \"ML_team\" is not a namespace name"));
  CHECK(any_contains(problems(kubernetes_yaml, {"launcher.kubernetes.gpu_resource=gpu"}), "extended resource"));
  CHECK(any_contains(problems(kubernetes_yaml, {"launcher.kubernetes.service_account=Bad_SA"}), "service account"));
  CHECK(any_contains(problems(kubernetes_yaml, {"launcher.host=10.0.0.1"}), "launcher.host: must be empty"));
  CHECK(any_contains(problems(kubernetes_yaml, {"experiment.name=___"}), "experiment.name"));
  CHECK(any_contains(problems(kubernetes_yaml, {"weight_sync.method=shm"}), "weight_sync.method: shm reaches"));
  CHECK(problems(kubernetes_yaml, {"weight_sync.method=collective"}).empty());
  // Colocated with one rollout rank: no transport is used, any method goes.
  CHECK(problems(kubernetes_yaml, {"weight_sync.method=shm", "placement=colocated", "rollout.workers=1",
                                   "data.batch_size=8"})
            .empty());
  // The message points at where the key was set.
  CHECK(any_contains(problems(kubernetes_yaml, {"launcher.kubernetes.namespace=X"}),
                     "--set launcher.kubernetes.namespace=X"));
  // render throws them all at once, as a ConfigError (exit 2).
  try {
    k8s_render(load(kubernetes_yaml, {"launcher.kind=local", "launcher.kubernetes.namespace=X"}), disaggregated,
               K8sRenderOptions{"img", ""});
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.problems().size() == 2);
  }
  CHECK_THROWS_WITH_AS(k8s_render(load(kubernetes_yaml), disaggregated, K8sRenderOptions{"", ""}),
                       doctest::Contains("--image"), ConfigError);
}

TEST_CASE("rendered objects, read back field by field") {
  const LoadedConfig loaded = load(kubernetes_yaml, {"rollout.device=cuda"});
  const K8sManifests m = k8s_render(loaded, disaggregated, K8sRenderOptions{"registry.example/tandem:1.0", ""});
  REQUIRE(m.files.size() == 3);
  const std::string name = "grpo-addition-v2";

  // The stream holds the same three documents.
  const std::vector<YAML::Node> stream = YAML::LoadAll(m.stream);
  REQUIRE(stream.size() == 3);
  CHECK(stream[0]["kind"].as<std::string>() == "ConfigMap");
  CHECK(stream[1]["kind"].as<std::string>() == "Service");
  CHECK(stream[2]["kind"].as<std::string>() == "Job");

  const YAML::Node config_map = YAML::Load(document(m, "configmap.yaml"));
  CHECK(config_map["apiVersion"].as<std::string>() == "v1");
  CHECK(config_map["metadata"]["name"].as<std::string>() == name + "-config");
  CHECK(config_map["metadata"]["namespace"].as<std::string>() == "ml");
  const std::string config_text = config_map["data"]["config.yaml"].as<std::string>();
  CHECK(config_text == config_to_yaml(loaded.config));
  CHECK(config_to_yaml(load_config_text(config_text, "cm").config) == config_to_yaml(loaded.config));

  const YAML::Node service = YAML::Load(document(m, "service.yaml"));
  CHECK(service["metadata"]["name"].as<std::string>() == name);
  CHECK(service["spec"]["clusterIP"].as<std::string>() == "None");
  CHECK(service["spec"]["publishNotReadyAddresses"].as<bool>());
  CHECK(service["spec"]["selector"]["app.kubernetes.io/instance"].as<std::string>() == name);
  CHECK(service["spec"]["ports"][0]["port"].as<int>() == 29500);
  CHECK(service["spec"]["ports"][0]["port"].Tag() != "!");  // an integer, not a quoted string
  CHECK(service["spec"]["ports"][0]["protocol"].as<std::string>() == "TCP");

  const YAML::Node job = YAML::Load(document(m, "job.yaml"));
  CHECK(job["apiVersion"].as<std::string>() == "batch/v1");
  CHECK(job["metadata"]["name"].as<std::string>() == name);
  const YAML::Node spec = job["spec"];
  CHECK(spec["completionMode"].as<std::string>() == "Indexed");
  CHECK(spec["completions"].as<int>() == 4);
  CHECK(spec["parallelism"].as<int>() == 4);
  CHECK(spec["backoffLimit"].as<int>() == 3 + 1 + 3);
  CHECK(spec["backoffLimit"].as<int>() == k8s_backoff_limit(loaded.config, disaggregated));
  // The Service selects exactly the Job's pods.
  for (const auto& label : service["spec"]["selector"]) {
    CHECK(spec["template"]["metadata"]["labels"][label.first.as<std::string>()].as<std::string>() ==
          label.second.as<std::string>());
  }
  const YAML::Node pod = spec["template"]["spec"];
  CHECK(pod["subdomain"].as<std::string>() == name);
  CHECK(pod["restartPolicy"].as<std::string>() == "OnFailure");
  CHECK_FALSE(pod["serviceAccountName"]);
  REQUIRE(pod["containers"].size() == 1);
  const YAML::Node container = pod["containers"][0];
  CHECK(container["image"].as<std::string>() == "registry.example/tandem:1.0");
  CHECK(container["command"].as<std::vector<std::string>>() ==
        std::vector<std::string>{"tandem", "k8s", "pod", "/etc/tandem/config.yaml", "--run-dir", "/run/tandem/" + name});
  CHECK(container["ports"][0]["containerPort"].as<int>() == 29500);
  // rollout.device: cuda: one GPU per pod, requested and limited alike; no GPU hiding.
  CHECK(container["resources"]["limits"]["nvidia.com/gpu"].as<int>() == 1);
  CHECK(container["resources"]["requests"]["nvidia.com/gpu"].as<int>() == 1);
  CHECK_FALSE(container["env"]);
  const YAML::Node mounts = container["volumeMounts"];
  REQUIRE(mounts.size() == 3);
  CHECK(mounts[0]["name"].as<std::string>() == "run-dir");
  CHECK(mounts[0]["mountPath"].as<std::string>() == "/run/tandem");
  CHECK(mounts[1]["mountPath"].as<std::string>() == "/etc/tandem");
  CHECK(mounts[1]["readOnly"].as<bool>());
  const YAML::Node volumes = pod["volumes"];
  REQUIRE(volumes.size() == 3);
  CHECK(volumes[0]["persistentVolumeClaim"]["claimName"].as<std::string>() == "tandem-runs");
  CHECK(volumes[1]["configMap"]["name"].as<std::string>() == name + "-config");
  CHECK(volumes[2]["emptyDir"]["medium"].as<std::string>() == "Memory");

  const YAML::Node kustomization = YAML::Load(m.kustomization);
  CHECK(kustomization["kind"].as<std::string>() == "Kustomization");
  CHECK(kustomization["resources"].as<std::vector<std::string>>() ==
        std::vector<std::string>{"configmap.yaml", "service.yaml", "job.yaml"});
}

TEST_CASE("CPU pods ask for no GPU and see none; hostPath, service account and run name") {
  const LoadedConfig loaded =
      load(kubernetes_yaml, {"launcher.kubernetes.run_dir_claim=\"\"", "launcher.kubernetes.host_path=/srv/tandem",
                             "launcher.kubernetes.service_account=trainer", "launcher.kubernetes.gpu_resource=amd.com/gpu",
                             "learner.device=cpu", "rollout.device=cpu"});
  CHECK(k8s_gpus_per_pod(loaded.config, disaggregated) == 0);
  const K8sManifests m = k8s_render(loaded, disaggregated, K8sRenderOptions{"tandem:dev", "team/run-1"});
  const YAML::Node pod = YAML::Load(document(m, "job.yaml"))["spec"]["template"]["spec"];
  CHECK(pod["serviceAccountName"].as<std::string>() == "trainer");
  const YAML::Node container = pod["containers"][0];
  CHECK_FALSE(container["resources"]);
  CHECK(container["env"][0]["name"].as<std::string>() == "NVIDIA_VISIBLE_DEVICES");
  CHECK(container["env"][0]["value"].as<std::string>() == "void");
  CHECK(container["command"][5].as<std::string>() == "/run/tandem/team/run-1");
  CHECK(pod["volumes"][0]["hostPath"]["path"].as<std::string>() == "/srv/tandem");
  CHECK(pod["volumes"][0]["hostPath"]["type"].as<std::string>() == "DirectoryOrCreate");

  // A learner on cuda, rollout on cpu: the one pod template asks for a GPU everywhere, and says so.
  const LoadedConfig mixed = load(kubernetes_yaml, {"learner.device=cuda"});
  CHECK(k8s_gpus_per_pod(mixed.config, disaggregated) == 1);
  CHECK(any_contains(k8s_config_notes(load(kubernetes_yaml, {"learner.device=cuda", "rollout.device=cpu"}), disaggregated),
                     "the controller's pod and 2 cpu worker pods hold one"));
  CHECK(any_contains(k8s_config_notes(load(kubernetes_yaml, {"learner.device=cuda", "rollout.device=cuda"}), disaggregated),
                     "the controller's pod holds one"));
  // device: auto finds no GPU unless another role asks for them.
  CHECK(any_contains(k8s_config_notes(load(kubernetes_yaml, {"learner.device=auto", "rollout.device=cpu"}), disaggregated),
                     "learner.device: auto"));
  CHECK_FALSE(any_contains(
      k8s_config_notes(load(kubernetes_yaml, {"learner.device=auto", "rollout.device=cuda"}), disaggregated), "auto"));
  // Paths outside builtin: must be in the image.
  CHECK(any_contains(k8s_config_notes(load(kubernetes_yaml, {"data.train=/data/train.jsonl"}), disaggregated),
                     "data.train: /data/train.jsonl must exist inside the image"));
  // Colocated workers host both roles: either on cuda asks for a GPU.
  const std::vector<WorkerId> colocated = {{"colocated", 0}, {"colocated", 1}};
  CHECK(k8s_gpus_per_pod(load(kubernetes_yaml, {"placement=colocated", "learner.device=cuda"}).config, colocated) == 1);
  CHECK(k8s_gpus_per_pod(load(kubernetes_yaml, {"placement=colocated"}).config, colocated) == 0);
}

TEST_CASE("strings that read as numbers or booleans are quoted") {
  const LoadedConfig loaded = load(kubernetes_yaml, {"experiment.name=yes", "launcher.kubernetes.namespace=123"});
  const K8sManifests m = k8s_render(loaded, disaggregated, K8sRenderOptions{"5000", "on"});
  const YAML::Node job = YAML::Load(document(m, "job.yaml"));
  CHECK(job["metadata"]["name"].as<std::string>() == "yes");
  CHECK(job["metadata"]["name"].Tag() == "!");  // quoted: a string in every YAML reader
  CHECK(job["metadata"]["namespace"].Tag() == "!");
  CHECK(job["spec"]["template"]["spec"]["containers"][0]["image"].Tag() == "!");
  CHECK(job["spec"]["template"]["spec"]["containers"][0]["command"][5].as<std::string>() == "/run/tandem/on");
}
