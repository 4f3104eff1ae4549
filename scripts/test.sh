#!/usr/bin/env bash
# The test command: install what is missing, build, run every test suite. GPU tests
# report a skip (exit 77) on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
scripts/fetch_tokenizer_assets.sh || echo "test: tokenizer assets not fetched; the bpe_tokenizer reference test says how" >&2
scripts/fetch_llama_cpp.sh || echo "test: llama.cpp not fetched; the gguf_llama_cpp test says how" >&2
scripts/fetch_chat_assets.sh || echo "test: chat-template assets not fetched; the chat_templates test says how" >&2
scripts/fetch_k8s_assets.sh || echo "test: Kubernetes schema assets not fetched; the k8s_render test says how" >&2
status=0
meson test -C build --print-errorlogs "$@" || status=$?
# One closing line any CI reader understands: "tests: N passed, N failed, N skipped".
python3 - build/meson-logs/testlog.json <<'PY'
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
for line in open(sys.argv[1]):
    result = json.loads(line)["result"]
    counts["passed" if result == "OK" else "skipped" if result == "SKIP" else "failed"] += 1
print("tests: {passed} passed, {failed} failed, {skipped} skipped".format(**counts))
PY
exit $status
