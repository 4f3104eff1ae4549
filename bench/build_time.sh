#!/usr/bin/env bash
# Cold build time of what a command needs, in fresh build directories, ccache off.
#   bench/build_time.sh [TARGET]      default target: controller/tandem (the quickstart's)
# Builds TARGET twice in the same run: with the project's defaults (-O2 -g1, precompiled
# <ATen/ATen.h> in the learner libraries) and with the reference flags the project used
# before (-O2 -g, no precompiled header), and prints one JSON line each plus the ratio.
# Takes ~10 minutes on 2 cores; run on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-controller/tandem}"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
work="$(mktemp -d /tmp/tandem-build-time-XXXXXX)"
trap 'rm -rf "$work"' EXIT

measure() {  # name, meson options...
  local name="$1"; shift
  meson setup "$work/$name" "$@" >"$work/$name.setup.log"
  local start end
  start=$(date +%s.%N)
  CCACHE_DISABLE=1 ninja -C "$work/$name" "$target" >"$work/$name.log"
  end=$(date +%s.%N)
  local steps
  steps=$(ninja -C "$work/$name" -t commands "$target" | wc -l)
  python3 -c "import json,sys; print(json.dumps({'bench': 'build_time', 'target': sys.argv[1], 'config': sys.argv[2], 'steps': int(sys.argv[3]), 'seconds': round(float(sys.argv[5]) - float(sys.argv[4]), 1), 'cores': $(nproc)}))" \
    "$target" "$name" "$steps" "$start" "$end" | tee "$work/$name.json"
}

measure default
measure reference -Ddebug=true -Db_pch=false
python3 - "$work/default.json" "$work/reference.json" <<'PY'
import json, sys
new, ref = (json.load(open(p)) for p in sys.argv[1:3])
print(json.dumps({"bench": "build_time", "target": new["target"], "ratio_reference_over_default": round(ref["seconds"] / new["seconds"], 2)}))
PY
