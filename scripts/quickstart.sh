#!/usr/bin/env bash
# The main job: install what is missing, build, run configs/quickstart.yaml on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh controller/tandem  # only what the run needs; scripts/test.sh builds the rest
exec build/controller/tandem run configs/quickstart.yaml "$@"
