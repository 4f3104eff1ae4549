#!/usr/bin/env bash
# The main job: install what is missing, build, run configs/quickstart.yaml on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
exec build/controller/tandem run configs/quickstart.yaml "$@"
