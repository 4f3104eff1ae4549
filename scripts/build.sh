#!/usr/bin/env bash
# Configures (once) and builds tandem in build/. CUDA sources are compiled when nvcc
# is found (on PATH or in /usr/local/cuda); a GPU is not needed to build.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if command -v ccache >/dev/null; then export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"; fi

if [ ! -f build/build.ninja ]; then
  meson setup build "$@"
elif [ $# -gt 0 ]; then
  meson configure build "$@"
fi
ninja -C build
