#!/usr/bin/env bash
# `tandem k8s render` and `tandem k8s pod`, through the real binary:
#   - the rendered directory builds with `kubectl kustomize`, and every object it yields
#     passes the Kubernetes API's schema (tests/k8s/validate_manifests.mjs);
#   - a deliberately broken object is rejected (the validator can fail);
#   - configs render cannot run are refused with exit 2 and the key, writing nothing;
#   - `tandem k8s pod --dry-run` maps JOB_COMPLETION_INDEX to the controller or a worker
#     with the binary's own training_workers().
# Usage: test_k8s_render.sh TANDEM_BINARY SOURCE_DIR
# Exits 77 (skipped) without kubectl or node, or without the npm assets under
# TANDEM_OFFLINE=1; without the assets otherwise it fails saying how to fetch them.
set -euo pipefail

tandem=$1
source_dir=$2
node_modules=$source_dir/build/test-assets/k8s/node/node_modules
validator=$source_dir/tests/k8s/validate_manifests.mjs

skip() { echo "skipped: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v kubectl >/dev/null || skip "kubectl is not on PATH (scripts/install_deps.sh installs Debian's kubernetes-client)"
kubectl kustomize --help >/dev/null 2>&1 || skip "this kubectl has no kustomize"
command -v node >/dev/null || skip "node is not on PATH (scripts/install_deps.sh installs it)"
if [ ! -f "$node_modules/kubernetes-models/package.json" ] || [ ! -f "$node_modules/js-yaml/package.json" ]; then
  message="$node_modules lacks kubernetes-models or js-yaml: run scripts/fetch_k8s_assets.sh (npm and the network)"
  [ "${TANDEM_OFFLINE:-0}" = 1 ] && skip "(TANDEM_OFFLINE=1) $message"
  fail "$message; TANDEM_OFFLINE=1 skips this test"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

cat > disaggregated.yaml <<'YAML'
experiment: {name: "K8s Render_Test"}
placement: disaggregated
rollout: {workers: 2, device: cuda}
learner: {workers: 1, device: cuda}
launcher:
  kind: kubernetes
  port: 29500
  kubernetes: {namespace: tandem-test, run_dir_claim: tandem-runs, service_account: trainer}
YAML
cat > colocated.yaml <<'YAML'
experiment: {name: colocated}
placement: colocated
rollout: {workers: 2}
learner: {workers: 2}
launcher: {kind: kubernetes, port: 5555, auth: none, kubernetes: {host_path: /srv/tandem}}
YAML

validate() {  # FILE: every object valid
  node "$validator" "$node_modules" "$1" > "$1.validate" 2>&1 || { cat "$1.validate" >&2; fail "$1 does not validate"; }
}

# 1. --out: a kustomization directory kubectl builds, whose objects are valid.
"$tandem" k8s render disaggregated.yaml --image registry.example/tandem:test --out out 2> render.err ||
  { cat render.err >&2; fail "render --out"; }
for f in configmap.yaml service.yaml job.yaml kustomization.yaml; do [ -s "out/$f" ] || fail "out/$f missing"; done
kubectl kustomize out > built.yaml || fail "kubectl kustomize out"
validate built.yaml
[ "$(grep -c '^valid: ' built.yaml.validate)" = 3 ] || fail "expected 3 valid objects: $(cat built.yaml.validate)"
for object in ConfigMap/k8s-render-test-config Service/k8s-render-test Job/k8s-render-test; do
  grep -q "^valid: $object " built.yaml.validate || fail "$object not among $(cat built.yaml.validate)"
done
grep -q 'completionMode: Indexed' built.yaml || fail "no Indexed Job in kustomize's output"
grep -q 'nvidia.com/gpu: 1' built.yaml || fail "no GPU request in kustomize's output"
grep -q 'subdomain: k8s-render-test' built.yaml || fail "no subdomain in kustomize's output"

# 2. stdout: the same objects in one stream; and the colocated, hostPath, CPU variant with --set.
"$tandem" k8s render disaggregated.yaml --image tandem:test > stream.yaml 2> /dev/null || fail "render to stdout"
validate stream.yaml
"$tandem" k8s render colocated.yaml --image tandem:test --run-dir team/run-1 --set launcher.max_restarts=5 \
  > colocated-stream.yaml 2> /dev/null || fail "render colocated"
validate colocated-stream.yaml
grep -q 'NVIDIA_VISIBLE_DEVICES' colocated-stream.yaml || fail "a CPU pod does not hide GPUs"
grep -q 'path: /srv/tandem' colocated-stream.yaml || fail "no hostPath"
grep -q 'backoffLimit: 8' colocated-stream.yaml || fail "backoffLimit is not 5 + 1 + 2"
grep -q -- '- /run/tandem/team/run-1' colocated-stream.yaml || fail "--run-dir not in the command"

# 3. The validator can fail: a string where an integer belongs, an unknown kind.
sed 's/^  parallelism: 4$/  parallelism: "4"/' out/job.yaml > broken-job.yaml
! cmp -s out/job.yaml broken-job.yaml || fail "the broken manifest was not changed"
if node "$validator" "$node_modules" broken-job.yaml > broken.out 2>&1; then fail "a string parallelism was accepted"; fi
grep -q 'invalid: Job/k8s-render-test' broken.out || fail "the rejection does not name the object: $(cat broken.out)"
grep -q 'parallelism' broken.out || fail "the rejection does not name the field: $(cat broken.out)"
printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{image: i}]}\n' > broken-pod.yaml
if node "$validator" "$node_modules" broken-pod.yaml > broken-pod.out 2>&1; then fail "a container without a name was accepted"; fi
grep -q 'must have required property name' broken-pod.out || fail "a nameless container: $(cat broken-pod.out)"
printf 'apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n' > unknown.yaml
if node "$validator" "$node_modules" unknown.yaml > unknown.out 2>&1; then fail "an unknown kind was accepted"; fi

# 4. Refusals: exit 2, the key named, nothing written.
expect_refusal() {  # KEY-OR-TEXT ARGS...
  local text=$1; shift
  set +e; "$tandem" k8s render "$@" --out refused > /dev/null 2> refusal.err; local code=$?; set -e
  [ "$code" = 2 ] || { cat refusal.err >&2; fail "render $* exited $code, expected 2"; }
  grep -q -- "$text" refusal.err || fail "render $*: no \"$text\" in: $(cat refusal.err)"
  [ ! -e refused ] || fail "render $* wrote refused/"
}
expect_refusal "launcher.kind: is local" disaggregated.yaml --image x --set launcher.kind=local
expect_refusal "launcher.kubernetes.run_dir_claim: every pod needs the run directory" disaggregated.yaml --image x \
  --set 'launcher.kubernetes.run_dir_claim=""'
expect_refusal "launcher.kubernetes.namespace" disaggregated.yaml --image x --set launcher.kubernetes.namespace=Bad_NS
expect_refusal "launcher.port" disaggregated.yaml --image x --set launcher.port=0
expect_refusal "--run-dir" disaggregated.yaml --image x --run-dir ../elsewhere

# 5. The pod entrypoint: JOB_COMPLETION_INDEX -> what runs (the binary's training_workers()).
pod() {  # INDEX CONFIG -> the dry-run line
  JOB_COMPLETION_INDEX=$1 "$tandem" k8s pod "$2" --run-dir "$work/run" --dry-run
}
line=$(pod 0 disaggregated.yaml)
grep -q "pod 0 of 4: controller: tandem run disaggregated.yaml --run-dir $work/run" <<< "$line" || fail "pod 0: $line"
address=tcp://k8s-render-test-0.k8s-render-test.tandem-test.svc:29500
for expected in "1 rollout 0" "2 rollout 1" "3 learner 0"; do
  read -r index role rank <<< "$expected"
  line=$(pod "$index" disaggregated.yaml)
  grep -q -- "worker $role-$rank: tandem worker --role $role --rank $rank --controller $address --keys $work/run/keys/$role-$rank.key --log-file $work/run/logs/$role-$rank.log" <<< "$line" ||
    fail "pod $index: $line"
done
line=$(pod 2 colocated.yaml)
grep -q -- "worker colocated-1: tandem worker --role colocated --rank 1 --controller tcp://colocated-0.colocated.default.svc:5555 --log-file" <<< "$line" ||
  fail "colocated pod 2: $line"
mkdir -p run && cp disaggregated.yaml run/config.yaml  # a restarted controller pod resumes
line=$(pod 0 disaggregated.yaml)
grep -q "controller: tandem resume $work/run" <<< "$line" || fail "pod 0 with a run: $line"
for bad in "" 4 x -1; do
  set +e; JOB_COMPLETION_INDEX=$bad "$tandem" k8s pod disaggregated.yaml --run-dir run --dry-run > /dev/null 2> pod.err
  code=$?; set -e
  [ "$code" = 2 ] && grep -q JOB_COMPLETION_INDEX pod.err || fail "JOB_COMPLETION_INDEX=\"$bad\": exit $code: $(cat pod.err)"
done
set +e; env -u JOB_COMPLETION_INDEX "$tandem" k8s pod disaggregated.yaml --run-dir run > /dev/null 2> pod.err; code=$?; set -e
[ "$code" = 2 ] && grep -q "JOB_COMPLETION_INDEX is not set" pod.err || fail "no JOB_COMPLETION_INDEX: exit $code: $(cat pod.err)"

echo "k8s render: kustomize + schema validation of $(grep -c '^valid: ' built.yaml.validate) objects, refusals and pod mapping ok"
