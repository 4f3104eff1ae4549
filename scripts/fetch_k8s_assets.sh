#!/usr/bin/env bash
# Fetches what the Kubernetes manifest test (tests/k8s/test_k8s_render.sh) needs, into
# build/test-assets/k8s/node/node_modules:
#   kubernetes-models  the Kubernetes API's OpenAPI schemas as validators (tests/k8s/validate_manifests.mjs)
#   js-yaml            to read kubectl kustomize's multi-document YAML
# Needs npm and the network the first time; does nothing when they are present, and
# nothing at all with TANDEM_OFFLINE=1 (the test then reports itself skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

assets=build/test-assets/k8s
# Pinned, with kubernetes-models' own dependencies, so the schemas never move under the
# test. 4.5.1 covers the Kubernetes 1.31 API (Indexed Jobs, successPolicy) and runs on
# Debian 12's Node.js 18 (5.x asks for Node 22).
packages=(
  kubernetes-models@4.5.1
  @kubernetes-models/validate@4.0.0
  @kubernetes-models/base@5.0.1
  @kubernetes-models/apimachinery@2.2.0
  js-yaml@4.1.0
)

if [ "${TANDEM_OFFLINE:-0}" = 1 ]; then
  echo "fetch_k8s_assets: TANDEM_OFFLINE=1, not fetching"
  exit 0
fi
have() {
  [ -f "$assets/node/node_modules/kubernetes-models/package.json" ] &&
    [ -f "$assets/node/node_modules/js-yaml/package.json" ] &&
    grep -q '"version": "4.5.1"' "$assets/node/node_modules/kubernetes-models/package.json"
}
if have; then
  echo "fetch_k8s_assets: present in $assets"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "fetch_k8s_assets: npm is missing: run scripts/install_deps.sh" >&2
  exit 1
fi
mkdir -p "$assets"
# Into a fresh directory, moved into place whole: an interrupted fetch is redone.
work=$(mktemp -d "$assets/node.partial.XXXXXX")
trap 'rm -rf "$work"' EXIT
npm install --silent --no-audit --no-fund --prefix "$work" "${packages[@]}"
rm -rf "$assets/node"
mv "$work" "$assets/node"
trap - EXIT
echo "fetch_k8s_assets: fetched into $assets"
