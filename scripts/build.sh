#!/usr/bin/env bash
# Configures (once) and builds tandem in build/. CUDA sources are compiled when nvcc
# is found (on PATH or in /usr/local/cuda); a GPU is not needed to build.
#   scripts/build.sh                       everything (tests and benchmarks included)
#   scripts/build.sh controller/tandem     only the named ninja targets (the quickstart's)
#   scripts/build.sh -Dcuda=disabled ...   arguments starting with - go to meson
# TANDEM_CPU_ARCH=portable (or another -march value) sets meson's cpu_arch when it configures
# (CI builds portable: binaries that run on any x86-64 CPU, tests/kernels/check_portable.py).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if command -v ccache >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
  # Precompiled headers (the libtorch-heavy targets use one) are cacheable only with these.
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
fi

meson_args=()
if [ -n "${TANDEM_CPU_ARCH:-}" ]; then meson_args+=("-Dcpu_arch=$TANDEM_CPU_ARCH"); fi
targets=()
for arg in "$@"; do
  if [[ "$arg" == -* ]]; then meson_args+=("$arg"); else targets+=("$arg"); fi
done
if [ ! -f build/build.ninja ]; then
  meson setup build "${meson_args[@]}"
elif [ ${#meson_args[@]} -gt 0 ]; then
  meson configure build "${meson_args[@]}"
fi
ninja -C build "${targets[@]}"
