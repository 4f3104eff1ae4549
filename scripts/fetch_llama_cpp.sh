#!/usr/bin/env bash
# Fetches llama.cpp, the independent reference of the GGUF tests (tests/actor/test_gguf_llama_cpp.cpp)
# and of the SentencePiece tokenizer's vectors, into build/test-assets/llama.cpp/:
#   lib/   prebuilt CPU libraries (libllama, libggml, libggml-base and the libggml-cpu-*
#          variants llama.cpp picks from at run time), npm @node-llama-cpp/linux-x64
#   src/   llama.cpp's source at the same release, cloned from the git bundle inside npm
#          node-llama-cpp: include/llama.h, ggml/include/, convert_hf_to_gguf.py (and
#          conversion/), models/ggml-vocab-*.gguf with their .inp/.out tokenizer vectors
# Needs npm, git and the network the first time; does nothing when both are present,
# and nothing at all with TANDEM_OFFLINE=1 (the tests then report themselves skipped).
# Linux x86-64 only: elsewhere it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

assets=build/test-assets/llama.cpp
version=3.22.1  # pinned: node-llama-cpp's release, which pins llama.cpp's; the reference must not move
libs_package=@node-llama-cpp/linux-x64@$version
source_package=node-llama-cpp@$version

if [ "${TANDEM_OFFLINE:-0}" = 1 ]; then
  echo "fetch_llama_cpp: TANDEM_OFFLINE=1, not fetching"
  exit 0
fi
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "fetch_llama_cpp: prebuilt llama.cpp libraries are fetched for Linux x86-64 only; not fetching"
  exit 0
fi
have_lib() { [ -f "$assets/lib/VERSION" ] && [ "$(cat "$assets/lib/VERSION")" = "$version" ]; }
have_src() { [ -f "$assets/src/VERSION" ] && [ "$(cat "$assets/src/VERSION")" = "$version" ]; }
if have_lib && have_src; then
  echo "fetch_llama_cpp: present in $assets"
  exit 0
fi
for tool in npm git tar; do
  if ! command -v "$tool" >/dev/null; then
    echo "fetch_llama_cpp: $tool is missing: run scripts/install_deps.sh" >&2
    exit 1
  fi
done
mkdir -p "$assets"
work=$(mktemp -d "$assets/fetch.partial.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Each part is built in $work and renamed into place whole: an interrupted fetch is redone.
if ! have_lib; then
  (cd "$work" && npm pack --silent "$libs_package" >/dev/null)
  mkdir -p "$work/libs"
  tar -xzf "$work"/node-llama-cpp-linux-x64-*.tgz -C "$work/libs"
  mkdir -p "$work/lib"
  cp "$work"/libs/package/bins/linux-x64/lib*.so "$work/lib/"
  # The names the harness links against, whatever the release suffix.
  (cd "$work/lib" && ln -sf libllama.v*.so libllama.so && ln -sf libggml.v*.so libggml.so)
  echo "$version" >"$work/lib/VERSION"
  rm -rf "$assets/lib"
  mv "$work/lib" "$assets/lib"
fi
if ! have_src; then
  (cd "$work" && npm pack --silent "$source_package" >/dev/null)
  tar -xzf "$work"/node-llama-cpp-$version.tgz -C "$work" package/llama/gitRelease.bundle
  git clone --quiet "$work/package/llama/gitRelease.bundle" "$work/src" 2>/dev/null
  rm -rf "$work/src/.git"
  echo "$version" >"$work/src/VERSION"
  rm -rf "$assets/src"
  mv "$work/src" "$assets/src"
fi
echo "fetch_llama_cpp: fetched into $assets"
