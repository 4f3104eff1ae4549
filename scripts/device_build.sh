#!/usr/bin/env bash
# Builds, tests and benchmarks tandem on the lent GPU machine in ONE call, writing
# everything under $OUT. See shared/GPU.md for what that machine has (CUDA 13 + nvcc, a
# Python venv with a CUDA PyTorch, meson, ninja, transformers; no apt, no network, bare at
# every start).
#
# Before the call, here (Debian 12), once:   scripts/fetch_device_deps.sh   (~30 MiB of .debs)
# The call, with the device tool:
#   run(carry=[".deps"], command="bash scripts/device_build.sh", timeout_s=600)
# ($OUT is set there by the tool; run locally, files go to build-gpu-out/.) The script keeps
# to --budget seconds (default 570), so that it ends and writes its summary before the
# tool's 600 s limit; pass a smaller --budget when the tool's reply may give less
# (limit_s). Later stages get what earlier ones leave: the benchmarks come last, and
# rollout_gpu.py skips the 8B model when too little is left. To run what a call had no
# time for (summary.json: "skipped"/"timeout"), make a second call, e.g.
#   run(carry=[".deps"], command="bash scripts/device_build.sh --stages deps,configure,build,bench", timeout_s=600)
# A machine stays warm only ~30 s after a call, so that call usually starts bare and
# rebuilds (build-gpu/ and the prefix are reused when it is still warm).
#
# Stages (--stages, comma-separated; default all):
#   deps       unpack .deps/debs/*.deb with dpkg-deb -x into --prefix (/opt/tandem-deps),
#              never into /; fix the .pc/.cmake files' paths; capnp and pkg-config wrappers
#   configure  find nvcc, the venv's torch, NCCL (CUDA toolkit or the venv's nvidia-nccl
#              wheel), pick the Gloo to link (see below); meson setup build-gpu with
#              -Dcuda=enabled -Dgpu_arch=sm_90 -Dtorch_dir=<venv torch>
#   build      ninja -C build-gpu -k 0 (all cores)
#   test       meson test (every suite, GPU included): test.log, testlog.json
#   compare    tests/gpu/hf_compare.py: our engine vs transformers, fp32 and bf16
#   cpp_bench  build-gpu/bench/weight_sync and bench/kernels_gpu when built (default
#              arguments, at most 90 s each)
#   rollout_bench  bench/rollout_gpu.py, which runs build-gpu/bench/rollout_gpu (ours vs
#              transformers; the rest of the budget)
#              ("bench" names both); both write bench.jsonl
# A failing stage is recorded and the next one still runs (failing tests do not stop the
# benchmarks); the exit status is 0 only if every stage run passed.
#
# $OUT receives at most these 8 files (the device tool brings back 8):
#   summary.json  per stage: status, seconds, rc; test counts      (rewritten after each stage)
#   env.txt       nvidia-smi, OS, compilers, versions, what was detected and chosen
#   build.log     deps + configure + build output
#   test.log      meson test output;   testlog.json  meson's per-test JSON lines
#   hf_compare.jsonl, bench.jsonl      JSON lines;   run.log   their stderr
#
# How the carried libraries are found: pkg-config via PKG_CONFIG_PATH (prefix first),
# headers via pkg-config's -I and an -isystem in cpp_args placed before libtorch's (so our
# code sees the Debian fmt 9 it links, not a copy bundled with libtorch; Gloo's headers are
# kept apart and come last, via CPLUS_INCLUDE_PATH, see below), link-time libraries via
# LIBRARY_PATH, and at run time an
# RPATH (-Wl,--disable-new-dtags, so it also covers libzmq's own dependencies) into the
# prefix: no global LD_LIBRARY_PATH, so Python and libtorch keep the machine's own libs.
# `source PREFIX/env.sh` sets the same variables in a shell.
#
# Gloo: pip's libtorch_cpu.so carries (and exports) its own Gloo, which the learner's c10d
# ProcessGroupGloo uses; linking Debian's libgloo.so into the same process as well would
# give two different Gloo versions with the same symbol names. So when libtorch ships Gloo
# headers and exports every Gloo symbol weight_sync uses (checked by compiling
# weight_sync's Gloo sources and comparing their undefined symbols with libtorch_cpu's
# exports), weight_sync links libtorch's Gloo (a libgloo.so linker script); otherwise
# Debian's libgloo (carried). TANDEM_GLOO=torch|debian forces one.
#
# Other options: --prefix DIR, --build-dir DIR (build-gpu), --budget SECONDS (570),
# --gpu-arch ARCH (sm_90), --cuda enabled|auto|disabled (enabled), --jobs N (all cores),
# --targets A,B (ninja targets to build, e.g. controller/tandem,bench/rollout_gpu; default
# all), --suites A,B (meson test suites to run, e.g. gpu; default all: on a short lease the
# CPU suites, which CI runs anyway, can wait),
# --unpack-only PREFIX (only the deps stage into PREFIX, then print
# how to use it: for testing the unpacking on any Debian/Ubuntu machine, no GPU needed).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

PREFIX=/opt/tandem-deps
BUILD_DIR=build-gpu
STAGES=all
BUDGET=570
GPU_ARCH=sm_90
CUDA_OPT=enabled
JOBS=''
TARGETS=''
SUITES=''
UNPACK_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --unpack-only) UNPACK_ONLY=1; PREFIX=${2:?--unpack-only needs a prefix}; shift 2 ;;
    --prefix) PREFIX=${2:?}; shift 2 ;;
    --build-dir) BUILD_DIR=${2:?}; shift 2 ;;
    --stages) STAGES=${2:?}; shift 2 ;;
    --budget) BUDGET=${2:?}; shift 2 ;;
    --gpu-arch) GPU_ARCH=${2:?}; shift 2 ;;
    --cuda) CUDA_OPT=${2:?}; shift 2 ;;
    --jobs) JOBS=${2:?}; shift 2 ;;
    --targets) TARGETS=${2:?}; shift 2 ;;
    --suites) SUITES=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "device_build: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$PREFIX" in /?*) ;; *) echo "device_build: --prefix must be an absolute path, not '$PREFIX'" >&2; exit 2 ;; esac
PREFIX=${PREFIX%/}
MULTIARCH=x86_64-linux-gnu
START=$(date +%s)

# ---------------------------------------------------------------------------------------
# deps: unpack the carried .debs into $PREFIX
# ---------------------------------------------------------------------------------------

extract_deb() {  # DEB DEST
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  else  # no dpkg: a .deb is an ar archive holding data.tar.*
    local tmp
    tmp=$(mktemp -d) || return 1
    (cd "$tmp" && ar x "$1") && tar -xf "$tmp"/data.tar.* -C "$2"
    local rc=$?
    rm -rf "$tmp"
    return $rc
  fi
}

# Paths in .pc and .cmake files: /usr/... -> ROOT/usr/... (ROOT is the unpacked root).
fix_paths() {  # ROOT [PRUNE_DIR]
  local root=$1 prune=${2:-/nonexistent} f
  while IFS= read -r -d '' f; do
    sed -i -E \
      -e "s#(^|[=[:space:]\"']|-I|-L)/usr(/|\"|'|[[:space:]]|\$)#\\1${root}/usr\\2#g" \
      -e '/^Requires\.private:/d' "$f"
  done < <(find "$root" -path "$prune" -prune -o -name '*.pc' -print0)
  while IFS= read -r -d '' f; do
    sed -i -E "s#(^|[\"[:space:];(])/usr/(include|lib|bin|share)#\\1${root}/usr/\\2#g" "$f"
  done < <(find "$root" -path "$prune" -prune -o \( -name '*.cmake' -o -name '*.cmake.in' \) -print0)
}

# Absolute symlinks (Debian has some) point into ROOT instead of /.
fix_links() {  # ROOT [PRUNE_DIR]
  local root=$1 prune=${2:-/nonexistent} l t
  while IFS= read -r -d '' l; do
    t=$(readlink "$l")
    case "$t" in /*) ln -sfn "$root$t" "$l" ;; esac
  done < <(find "$root" -path "$prune" -prune -o -type l -print0)
}

write_env_sh() {  # PREFIX
  local P=$1
  cat >"$P/env.sh" <<EOF
# Generated by scripts/device_build.sh: the carried Debian packages unpacked under $P.
export TANDEM_DEPS_PREFIX=$P
export TANDEM_DEPS_LIBDIRS=$P/usr/lib/$MULTIARCH:$P/lib/$MULTIARCH:$P/usr/lib
export PKG_CONFIG_PATH=$P/usr/lib/$MULTIARCH/pkgconfig:$P/usr/share/pkgconfig:$P/usr/lib/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}
# Headers: pass -isystem \$TANDEM_DEPS_INCLUDE (device_build.sh does, in cpp_args). Not
# CPLUS_INCLUDE_PATH: GCC then ignores -I/-isystem for that directory and pkgconf drops it,
# so libtorch's include dirs would come first.
export TANDEM_DEPS_INCLUDE=$P/usr/include
export LIBRARY_PATH=\$TANDEM_DEPS_LIBDIRS\${LIBRARY_PATH:+:\$LIBRARY_PATH}
# Meson's Boost lookup (tools/cudasim's Boost.Context) searches BOOST_ROOT.
export BOOST_ROOT=$P/usr
export PATH=$P/bin:\$PATH
# The machine's pkg-config when it has one, else the carried pkgconf.
if ! PATH=\${PATH#$P/bin:} command -v pkg-config >/dev/null 2>&1; then export PKG_CONFIG=$P/bin/pkg-config-carried; fi
# Programs linked here find these at run time by RPATH; for anything else:
#   LD_LIBRARY_PATH=\$TANDEM_DEPS_LIBDIRS program
EOF
}

unpack_deps() {  # PREFIX
  local P=$1 debs stamp
  debs=("$ROOT"/.deps/debs/*.deb)
  if [ ! -e "${debs[0]}" ]; then
    echo "deps: no .deb files in $ROOT/.deps/debs: run scripts/fetch_device_deps.sh on the dev machine and carry .deps"
    return 1
  fi
  stamp=$(cd "$ROOT/.deps/debs" && ls -1 -- *.deb | sort | cksum | cut -d' ' -f1)
  if [ -f "$P/.tandem-deps-stamp" ] && [ "$(cat "$P/.tandem-deps-stamp")" = "$stamp" ]; then
    echo "deps: $P already holds these ${#debs[@]} packages"
    write_env_sh "$P"
    return 0
  fi
  if [ -e "$P" ]; then
    # Only ever remove a prefix this script made (or an empty directory).
    if [ -f "$P/.tandem-deps-stamp" ] || [ -z "$(ls -A "$P" 2>/dev/null)" ]; then
      rm -rf "$P"
    else
      echo "deps: $P exists and was not made by this script; choose another --prefix"
      return 1
    fi
  fi
  mkdir -p "$P/bin" "$P/gloo" || return 1
  local deb name dest
  for deb in "${debs[@]}"; do
    name=$(basename "$deb")
    dest=$P
    # Debian's Gloo headers and libgloo.so link apart, so that they are on the search
    # paths only when Debian's Gloo is the one linked (see the header).
    case "$name" in libgloo-dev_*) dest=$P/gloo ;; esac
    extract_deb "$deb" "$dest" || { echo "deps: cannot unpack $name"; return 1; }
  done
  fix_links "$P" "$P/gloo"
  fix_links "$P/gloo"
  # libgloo-dev's libgloo.so -> libgloo.so.0, which libgloo0 put in the main prefix.
  local l
  while IFS= read -r -d '' l; do
    [ -e "$l" ] && continue
    local rel=${l#"$P/gloo"}
    [ -e "$P$(dirname "$rel")/$(readlink "$l")" ] && ln -sfn "$P$(dirname "$rel")/$(readlink "$l")" "$l"
  done < <(find "$P/gloo" -type l -print0)
  fix_paths "$P" "$P/gloo"
  fix_paths "$P/gloo"
  local libpath="$P/usr/lib/$MULTIARCH:$P/lib/$MULTIARCH:$P/usr/lib"
  # capnp finds its plugin (capnpc-c++) on PATH and "/capnp/c++.capnp" on its import path.
  cat >"$P/bin/capnp" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH=$libpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export PATH=$P/usr/bin:\$PATH
if [ "\$1" = compile ]; then shift; exec $P/usr/bin/capnp compile -I$P/usr/include "\$@"; fi
exec $P/usr/bin/capnp "\$@"
EOF
  # protoc: the carried one, matching the carried libprotobuf headers its output includes.
  cat >"$P/bin/protoc" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH=$libpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
exec $P/usr/bin/protoc "\$@"
EOF
  cat >"$P/bin/pkg-config-carried" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH=$libpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
exec $P/usr/bin/pkgconf "\$@"
EOF
  chmod +x "$P/bin/capnp" "$P/bin/protoc" "$P/bin/pkg-config-carried"
  write_env_sh "$P"
  echo "$stamp" >"$P/.tandem-deps-stamp"
  echo "deps: unpacked ${#debs[@]} packages into $P ($(du -sm "$P" | cut -f1) MiB)"
}

if [ "$UNPACK_ONLY" = 1 ]; then
  unpack_deps "$PREFIX" || exit 1
  echo "device_build: unpacked; use it with: source $PREFIX/env.sh"
  exit 0
fi

# ---------------------------------------------------------------------------------------
# Bookkeeping: $OUT, stage records, summary.json
# ---------------------------------------------------------------------------------------
OUT=${OUT:-$ROOT/build-gpu-out}
mkdir -p "$OUT"
LOG_BUILD=$OUT/build.log LOG_TEST=$OUT/test.log LOG_RUN=$OUT/run.log ENV_TXT=$OUT/env.txt
: >"$LOG_BUILD"; : >"$LOG_TEST"; : >"$LOG_RUN"; : >"$ENV_TXT"
NPROC=${JOBS:-$(nproc 2>/dev/null || echo 4)}
S_NAMES=() S_STATUS=() S_SECONDS=() S_RC=() S_NOTE=()
TEST_COUNTS='null'

elapsed() { echo $(( $(date +%s) - START )); }
remaining() { echo $(( BUDGET - $(elapsed) )); }
want() {  # "bench" stands for both benchmark stages
  [ "$STAGES" = all ] || [[ ",$STAGES," == *",$1,"* ]] || { [[ $1 == *_bench ]] && [[ ",$STAGES," == *",bench,"* ]]; }
}
say() { echo "device_build: $*"; }

json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1" 2>/dev/null || printf '"%s"' "${1//\"/\'}"; }

write_summary() {
  local i sep='' all_ok=true
  {
    printf '{"script":"device_build","prefix":%s,"build_dir":%s,"budget_s":%s,"elapsed_s":%s,"stages":[' \
      "$(json_str "$PREFIX")" "$(json_str "$BUILD_DIR")" "$BUDGET" "$(elapsed)"
    for i in "${!S_NAMES[@]}"; do
      printf '%s{"stage":"%s","status":"%s","seconds":%s,"rc":%s,"note":%s}' "$sep" "${S_NAMES[$i]}" \
        "${S_STATUS[$i]}" "${S_SECONDS[$i]}" "${S_RC[$i]}" "$(json_str "${S_NOTE[$i]}")"
      sep=','
      [ "${S_STATUS[$i]}" = ok ] || all_ok=false
    done
    printf '],"tests":%s,"ok":%s}\n' "$TEST_COUNTS" "$all_ok"
  } >"$OUT/summary.json"
}

# run_stage NAME FUNCTION: runs FUNCTION (which writes its own logs) and records it.
# FUNCTION returns 0 ok, 124 timed out, else failed; STAGE_NOTE may say more.
run_stage() {
  local name=$1 fn=$2 t0 rc status
  want "$name" || return 0
  if [ "$(remaining)" -le 5 ]; then
    S_NAMES+=("$name"); S_STATUS+=(skipped); S_SECONDS+=(0); S_RC+=(null); S_NOTE+=("no time left in --budget $BUDGET")
    say "$name: skipped, no time left"; write_summary; return 0
  fi
  say "$name: start at ${START:+$(elapsed)} s"
  STAGE_NOTE=''
  t0=$(date +%s)
  "$fn"; rc=$?
  case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
  S_NAMES+=("$name"); S_STATUS+=("$status"); S_SECONDS+=($(( $(date +%s) - t0 ))); S_RC+=("$rc"); S_NOTE+=("$STAGE_NOTE")
  say "$name: $status (rc $rc, $(( $(date +%s) - t0 )) s)${STAGE_NOTE:+: $STAGE_NOTE}"
  write_summary
}

# A stage's own time limit: what is left of the budget, less RESERVE seconds for later stages.
limit() { local reserve=${1:-0} l; l=$(( $(remaining) - reserve )); [ $l -lt 10 ] && l=10; echo $l; }

# ---------------------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------------------
stage_deps() {
  { echo "=== deps $(date -u +%FT%TZ)"; unpack_deps "$PREFIX"; } >>"$LOG_BUILD" 2>&1 || return 1
  # shellcheck disable=SC1091
  source "$PREFIX/env.sh"
}

# Facts about the machine (env.txt) and the choices configure makes from them.
TORCH='' CUDA_ROOT='' NCCL_DIR='' NCCL_LIBDIR='' GLOO_MODE='' CPP_STD=c++17 PY=python3 MESON=(meson)
detect() {
  command -v python3 >/dev/null || PY=python
  command -v meson >/dev/null || MESON=("$PY" -m mesonbuild.mesonmain)
  local ninja_bin
  ninja_bin=$(command -v ninja || $PY -c 'import ninja,os;print(os.path.join(ninja.BIN_DIR,"ninja"))' 2>/dev/null)
  [ -n "$ninja_bin" ] && export NINJA=$ninja_bin
  local nvcc
  nvcc=$(command -v nvcc || true)
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  if [ -n "$nvcc" ]; then
    CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
    PATH="$(dirname "$nvcc"):$PATH"; export PATH CUDA_PATH=$CUDA_ROOT CUDA_HOME=$CUDA_ROOT
    local d
    for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" "$CUDA_ROOT/targets/x86_64-linux/lib"; do
      [ -d "$d" ] && export LIBRARY_PATH="${LIBRARY_PATH:+$LIBRARY_PATH:}$d"
    done
  fi
  TORCH=$($PY -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>/dev/null || true)
  # NCCL: the CUDA toolkit's or the system's (meson's default search), else the venv's wheel.
  local so inc
  if [ -e /usr/local/cuda/lib64/libnccl.so ] || [ -e /usr/lib/$MULTIARCH/libnccl.so ]; then
    NCCL_DIR=''
  else
    so=$($PY - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for r in roots:
    for f in sorted(glob.glob(os.path.join(r, "nvidia", "**", "libnccl.so*"), recursive=True)):
        print(f); raise SystemExit
EOF
)
    if [ -n "$so" ]; then
      NCCL_LIBDIR=$(dirname "$so")
      inc=$(find "$(dirname "$NCCL_LIBDIR")" -maxdepth 3 -name nccl.h 2>/dev/null | head -1)
      NCCL_DIR=$PREFIX/nccl
      rm -rf "$NCCL_DIR"; mkdir -p "$NCCL_DIR/lib" "$NCCL_DIR/include"
      ln -sfn "$so" "$NCCL_DIR/lib/libnccl.so"
      ln -sfn "$so" "$NCCL_DIR/lib/$(basename "$so")"
      if [ -n "$inc" ]; then
        for f in "$(dirname "$inc")"/*; do ln -sfn "$f" "$NCCL_DIR/include/$(basename "$f")"; done
      fi
    fi
  fi
}

# Which Gloo weight_sync links (see the header). Echoes torch or debian.
probe_gloo() {
  local tmp missing
  if [ -n "${TANDEM_GLOO:-}" ]; then echo "$TANDEM_GLOO"; return; fi
  if [ -z "$TORCH" ] || [ ! -f "$TORCH/include/gloo/broadcast.h" ] || ! command -v nm >/dev/null; then
    echo "gloo probe: libtorch has no Gloo headers (or no nm): Debian's Gloo" >&2; echo debian; return
  fi
  tmp=$(mktemp -d)
  mkdir -p "$tmp/inc" && ln -s "$TORCH/include/gloo" "$tmp/inc/gloo"
  if ! g++ -std=$CPP_STD -D_GLIBCXX_USE_CXX11_ABI=1 -c -I"$ROOT" -I"$ROOT/include" -isystem "$tmp/inc" \
       -isystem "$PREFIX/usr/include" -o "$tmp/a.o" "$ROOT/weight_sync/collective.cpp" >&2 ||
     ! g++ -std=$CPP_STD -D_GLIBCXX_USE_CXX11_ABI=1 -c -I"$ROOT" -I"$ROOT/include" -isystem "$tmp/inc" \
       -isystem "$PREFIX/usr/include" -o "$tmp/b.o" "$ROOT/weight_sync/directory_store.cpp" >&2; then
    echo "gloo probe: weight_sync does not compile against libtorch's Gloo headers: Debian's Gloo" >&2
    rm -rf "$tmp"; echo debian; return
  fi
  nm -u "$tmp/a.o" "$tmp/b.o" | awk '{print $NF}' | grep '^_ZN4gloo' | sort -u >"$tmp/need"
  nm -D --defined-only "$TORCH/lib/libtorch_cpu.so" | awk '{print $NF}' | grep '^_ZN4gloo' | sort -u >"$tmp/have"
  missing=$(comm -23 "$tmp/need" "$tmp/have")
  if [ -n "$missing" ] || [ ! -s "$tmp/need" ]; then
    echo "gloo probe: libtorch_cpu.so does not export: $(echo "${missing:-(nothing needed?)}" | tr "\n" " "): Debian's Gloo" >&2
    rm -rf "$tmp"; echo debian; return
  fi
  echo "gloo probe: libtorch_cpu.so exports all $(wc -l <"$tmp/need") Gloo symbols weight_sync uses: libtorch's Gloo" >&2
  rm -rf "$tmp"; echo torch
}

# The C++ standard libtorch's headers accept (the project is C++17; newer torch may want 20).
probe_cpp_std() {
  local tmp std
  [ -n "$TORCH" ] || { echo c++17; return; }
  tmp=$(mktemp -d)
  printf '#include <torch/torch.h>\nint main() { return 0; }\n' >"$tmp/t.cpp"
  for std in c++17 c++20; do
    if g++ -std=$std -fsyntax-only -D_GLIBCXX_USE_CXX11_ABI=1 -isystem "$TORCH/include" \
         -isystem "$TORCH/include/torch/csrc/api/include" "$tmp/t.cpp" 2>"$tmp/err"; then
      echo "c++ probe: <torch/torch.h> compiles with -std=$std" >&2; rm -rf "$tmp"; echo $std; return
    fi
    echo "c++ probe: <torch/torch.h> fails with -std=$std:" >&2; head -c 2000 "$tmp/err" >&2
  done
  rm -rf "$tmp"; echo c++17
}

write_env_txt() {
  {
    echo "== date: $(date -u +%FT%TZ)   host: $(hostname)   nproc: $NPROC"
    echo "== nvidia-smi"; if command -v nvidia-smi >/dev/null; then nvidia-smi 2>&1; else echo "(no nvidia-smi)"; fi
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>&1
    echo "== os"; cat /etc/os-release 2>/dev/null | head -4; uname -a; ldd --version 2>&1 | head -1
    free -g 2>/dev/null | head -2; df -h /tmp "$ROOT" 2>/dev/null
    echo "== toolchain"
    echo "nvcc: $(command -v nvcc || echo none)"; nvcc --version 2>&1 | tail -2
    echo "CUDA_ROOT=$CUDA_ROOT"; ls -d /usr/local/cuda* 2>&1
    echo "g++: $(command -v g++ || echo none)"; g++ --version 2>&1 | head -1
    echo "meson: $(command -v meson || echo none) $(meson --version 2>&1)"
    echo "ninja: $(command -v ninja || echo none) $(ninja --version 2>&1)"
    echo "cmake: $(cmake --version 2>&1 | head -1)"
    echo "pkg-config: ${PKG_CONFIG:-$(command -v pkg-config || echo none)} $(${PKG_CONFIG:-pkg-config} --version 2>&1)"
    echo "capnp: $(command -v capnp) $(capnp --version 2>&1)"
    echo "== python: $(command -v $PY) $($PY --version 2>&1)"
    $PY - <<'EOF' 2>&1
import importlib
for m in ["torch", "transformers", "tokenizers", "safetensors", "numpy", "triton"]:
    try:
        mod = importlib.import_module(m)
        print(f"{m} {getattr(mod, '__version__', '?')}")
    except Exception as e:
        print(f"{m}: not importable ({e.__class__.__name__}: {e})")
try:
    import torch
    print("torch.cuda", torch.version.cuda, "available", torch.cuda.is_available(),
          "devices", torch.cuda.device_count(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
    print("torch cxx11 abi", torch._C._GLIBCXX_USE_CXX11_ABI, "nccl", getattr(torch.cuda.nccl, "version", lambda: "?")())
except Exception as e:
    print("torch details:", e)
EOF
    echo "TORCH=$TORCH"
    ls "$TORCH/lib" 2>/dev/null | grep -E '^lib(torch|c10|nccl|gomp)' | tr '\n' ' '; echo
    echo "torch Gloo headers: $([ -f "$TORCH/include/gloo/broadcast.h" ] && echo yes || echo no);" \
         "Gloo symbols exported by libtorch_cpu: $(nm -D --defined-only "$TORCH/lib/libtorch_cpu.so" 2>/dev/null | grep -c ' _ZN4gloo')"
    echo "== NCCL: nccl_dir='${NCCL_DIR}' (empty: meson's default search) libdir='${NCCL_LIBDIR}'"
    ls -l /usr/local/cuda/lib64/libnccl* /usr/lib/$MULTIARCH/libnccl* 2>/dev/null
    echo "== chosen: gloo=$GLOO_MODE cpp_std=$CPP_STD gpu_arch=$GPU_ARCH prefix=$PREFIX"
    echo "== env"; env | grep -E '^(PATH|PKG_CONFIG|CPLUS_INCLUDE_PATH|LIBRARY_PATH|LD_LIBRARY_PATH|CUDA_PATH|CUDA_HOME)=' | sort
  } >>"$ENV_TXT" 2>&1
}

stage_configure() {
  {
    echo "=== configure $(date -u +%FT%TZ)"
    detect
    if [ -z "$TORCH" ]; then echo "configure: python3 cannot import torch"; fi
    if [ -z "$CUDA_ROOT" ]; then echo "configure: no nvcc found (PATH, /usr/local/cuda/bin)"; fi
    # The two probes compile independently: run them side by side.
    local std_tmp
    std_tmp=$(mktemp -d)
    probe_cpp_std >"$std_tmp/std" 2>"$std_tmp/log" &
    local std_pid=$!
    GLOO_MODE=$(probe_gloo)
    wait $std_pid; CPP_STD=$(cat "$std_tmp/std"); cat "$std_tmp/log"; rm -rf "$std_tmp"
    if [ "$CPP_STD" != c++17 ]; then
      # weight_sync's Gloo probe ran with c++17; rerun it with the standard the build uses.
      GLOO_MODE=$(probe_gloo)
    fi
    local gloo_inc gloo_lib
    if [ "$GLOO_MODE" = torch ]; then
      mkdir -p "$PREFIX/gloo-torch/include" "$PREFIX/gloo-torch/lib"
      ln -sfn "$TORCH/include/gloo" "$PREFIX/gloo-torch/include/gloo"
      echo "INPUT($TORCH/lib/libtorch_cpu.so)" >"$PREFIX/gloo-torch/lib/libgloo.so"
      gloo_inc=$PREFIX/gloo-torch/include gloo_lib=$PREFIX/gloo-torch/lib
    else
      echo "configure: WARNING: Debian's libgloo and libtorch's own Gloo end up in one process" \
           "(learner + weight_sync): if Gloo tests crash, this is the first suspect"
      gloo_inc=$PREFIX/gloo/usr/include gloo_lib=$PREFIX/gloo/usr/lib
    fi
    # Gloo's headers come last (after libtorch's), whichever Gloo is linked.
    export CPLUS_INCLUDE_PATH="${CPLUS_INCLUDE_PATH:+$CPLUS_INCLUDE_PATH:}$gloo_inc" LIBRARY_PATH="$LIBRARY_PATH:$gloo_lib"
    local rpath=("$PREFIX/usr/lib/$MULTIARCH" "$PREFIX/lib/$MULTIARCH" "$PREFIX/usr/lib")
    # libtorch's own: for the Gloo linker script, which weight_sync-only programs link too.
    [ -n "$TORCH" ] && rpath+=("$TORCH/lib")
    [ -n "$NCCL_LIBDIR" ] && rpath+=("$NCCL_LIBDIR")
    [ -n "$CUDA_ROOT" ] && rpath+=("$CUDA_ROOT/lib64")
    # Programs that link CUDA code (tandem, the tests, the benchmarks) are linked by nvcc,
    # which takes cuda_link_args, not cpp_link_args; "-rpath=DIR" keeps nvcc from splitting
    # the option at its commas.
    local link_args="'-Wl,--disable-new-dtags'" cuda_link_args="'-Xlinker=--disable-new-dtags'" d
    for d in "${rpath[@]}"; do
      link_args+=",'-Wl,-rpath,$d','-Wl,-rpath-link,$d'"
      cuda_link_args+=",'-Xlinker=-rpath=$d','-Xlinker=-rpath-link=$d'"
    done
    local opts=(
      -Dcuda="$CUDA_OPT" -Dgpu_arch="$GPU_ARCH" -Dtorch_dir="$TORCH" -Dcpp_std="$CPP_STD"
      # libtorch.so's own NEEDED entries (libtorch_cuda.so) must stay, or C++ sees no CUDA.
      -Db_asneeded=false
      # GCC 13+ no longer includes <cstdint> transitively; Debian 12's yaml-cpp/capnp headers
      # assumed it. The prefix's headers come before libtorch's include dirs (cpp_args precede
      # a dependency's -isystem; pkg-config's -I precede all): our code then sees one fmt,
      # the Debian fmt 9 it links, even where libtorch bundles other fmt headers.
      "-Dcpp_args=['-include','cstdint','-isystem$PREFIX/usr/include']"
      "-Dcpp_link_args=[$link_args]"
    )
    [ -n "$NCCL_DIR" ] && opts+=(-Dnccl_dir="$NCCL_DIR")
    # Only a project with CUDA on knows the cuda_* options.
    [ -n "$CUDA_ROOT" ] && [ "$CUDA_OPT" != disabled ] && opts+=("-Dcuda_link_args=[$cuda_link_args]")
    write_env_txt
    # What later calls with --stages build/test/... (no configure) need again.
    mkdir -p "$BUILD_DIR"
    {
      echo "# Written by scripts/device_build.sh (configure): the build's environment."
      local v
      for v in PATH CPLUS_INCLUDE_PATH LIBRARY_PATH PKG_CONFIG_PATH PKG_CONFIG CUDA_PATH CUDA_HOME NINJA; do
        [ -n "${!v:-}" ] && printf 'export %s=%q\n' "$v" "${!v}"
      done
      printf 'GLOO_MODE=%q CPP_STD=%q\n' "$GLOO_MODE" "$CPP_STD"
    } >"$BUILD_DIR/device_env.sh"
    echo "configure: ${MESON[*]} setup $BUILD_DIR ${opts[*]}"
    # meson --reconfigure does not always carry new link options into build.ninja (seen
    # with cuda_link_args): when the options changed, configure afresh (--wipe).
    local saved="$BUILD_DIR/device_opts.txt" rc
    if [ -f "$BUILD_DIR/build.ninja" ] && [ -f "$saved" ] && [ "$(cat "$saved")" = "${opts[*]}" ]; then
      timeout "$(limit 60)" "${MESON[@]}" setup --reconfigure "$BUILD_DIR" "${opts[@]}"
    elif [ -f "$BUILD_DIR/build.ninja" ]; then
      echo "configure: options changed since $BUILD_DIR was configured: --wipe"
      timeout "$(limit 60)" "${MESON[@]}" setup --wipe "$BUILD_DIR" "${opts[@]}"
    else
      timeout "$(limit 60)" "${MESON[@]}" setup "$BUILD_DIR" "${opts[@]}"
    fi
    rc=$?
    [ $rc -eq 0 ] && printf '%s' "${opts[*]}" >"$saved"
    (exit $rc)
  } >>"$LOG_BUILD" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && STAGE_NOTE="meson setup failed: see build.log (and $BUILD_DIR/meson-logs/meson-log.txt, appended)" &&
    { echo "=== $BUILD_DIR/meson-logs/meson-log.txt (tail)"; tail -n 150 "$BUILD_DIR/meson-logs/meson-log.txt" 2>/dev/null; } >>"$LOG_BUILD"
  STAGE_NOTE="${STAGE_NOTE:+$STAGE_NOTE; }gloo=$GLOO_MODE cpp_std=$CPP_STD nccl_dir=${NCCL_DIR:-default}"
  return $rc
}

stage_build() {
  [ -f "$BUILD_DIR/build.ninja" ] || { STAGE_NOTE="not configured"; return 1; }
  local rc
  {
    echo "=== build $(date -u +%FT%TZ)"
    local targets=()
    [ -n "$TARGETS" ] && IFS=, read -r -a targets <<<"$TARGETS"
    # Time is kept back only for the later stages this call runs.
    local reserve=10
    want test && reserve=$((reserve + 50))
    want compare && reserve=$((reserve + 30))
    { want cpp_bench || want rollout_bench; } && reserve=$((reserve + 30))
    timeout "$(limit $reserve)" "${NINJA:-ninja}" -C "$BUILD_DIR" -k 0 -j "$NPROC" "${targets[@]}"
  } >>"$LOG_BUILD" 2>&1
  rc=$?
  local errors
  errors=$(grep -c -E '^FAILED: ' "$LOG_BUILD" || true)
  STAGE_NOTE="$errors ninja targets failed"
  if [ -x "$BUILD_DIR/controller/tandem" ]; then
    local nf
    nf=$(ldd "$BUILD_DIR/controller/tandem" 2>&1 | grep -c 'not found')
    [ "$nf" -gt 0 ] && STAGE_NOTE+="; tandem: $nf libraries not found (ldd in build.log)"
  fi
  {
    echo "=== binaries"
    ls -la "$BUILD_DIR/controller/tandem" "$BUILD_DIR/bench/" 2>&1 | head -40
    echo "=== ldd $BUILD_DIR/controller/tandem"
    ldd "$BUILD_DIR/controller/tandem" 2>&1 | grep -E 'not found|torch|c10|nccl|zmq|capnp|kj|yaml|fmt|gloo|icu|pcre|cublas|cudart' 
    readelf -d "$BUILD_DIR/controller/tandem" 2>/dev/null | grep -E 'RPATH|RUNPATH'
  } >>"$LOG_BUILD" 2>&1
  return $rc
}

stage_test() {
  [ -f "$BUILD_DIR/build.ninja" ] || { STAGE_NOTE="not configured"; return 1; }
  local rc suites=() s x
  if [ -n "$SUITES" ]; then
    IFS=, read -r -a s <<<"$SUITES"
    for x in "${s[@]}"; do suites+=(--suite "$x"); done
  fi
  # Leave some of the budget for compare and bench.
  timeout --kill-after=10 "$(limit 90)" "${MESON[@]}" test -C "$BUILD_DIR" --no-rebuild --print-errorlogs \
    --num-processes "$NPROC" "${suites[@]}" >>"$LOG_TEST" 2>&1
  rc=$?
  cp "$BUILD_DIR/meson-logs/testlog.json" "$OUT/testlog.json" 2>/dev/null
  if [ -f "$OUT/testlog.json" ]; then
    TEST_COUNTS=$($PY - "$OUT/testlog.json" <<'EOF'
import json, sys
c = {"passed": 0, "failed": 0, "skipped": 0, "gpu_skipped": [], "failed_names": []}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["result"] == "OK": c["passed"] += 1
    elif r["result"] == "SKIP":
        c["skipped"] += 1
        # "tandem:gpu / kernels" (meson names a test project:suite / name)
        if ":gpu /" in r["name"] or "gpu" in (r.get("suite") or []): c["gpu_skipped"].append(r["name"])
    else:
        c["failed"] += 1; c["failed_names"].append(r["name"] + ":" + r["result"])
print(json.dumps(c))
EOF
)
    [ -n "$TEST_COUNTS" ] || TEST_COUNTS=null
    STAGE_NOTE="tests $TEST_COUNTS"
    echo "tests: $TEST_COUNTS" >>"$LOG_TEST"
  fi
  return $rc
}

stage_compare() {
  local tandem=$BUILD_DIR/controller/tandem
  [ -x "$tandem" ] || { STAGE_NOTE="no $tandem"; return 1; }
  echo "=== hf_compare $(date -u +%FT%TZ)" >>"$LOG_RUN"
  {
    PYTHONUNBUFFERED=1 timeout --kill-after=10 "$(limit 45)" "$PY" tests/gpu/hf_compare.py --tandem "$tandem" --device cuda \
      >"$OUT/hf_compare.jsonl"
  } 2>>"$LOG_RUN"
}

stage_cpp_bench() {
  local rc=0 r cap name
  for name in weight_sync kernels_gpu; do
    if [ ! -x "$BUILD_DIR/bench/$name" ]; then
      echo "{\"bench\":\"$name\",\"skipped\":\"no $BUILD_DIR/bench/$name\"}" >>"$OUT/bench.jsonl"
      [ "$name" = weight_sync ] && rc=1
      continue
    fi
    # Default arguments; each at most 90 s, so that the rollout benchmark keeps most of the time.
    cap=$(limit 150); [ "$cap" -gt 90 ] && cap=90
    echo "=== bench/$name $(date -u +%FT%TZ) (at most $cap s)" >>"$LOG_RUN"
    timeout --kill-after=10 "$cap" "$BUILD_DIR/bench/$name" >>"$OUT/bench.jsonl" 2>>"$LOG_RUN"
    r=$?
    if [ $r -ne 0 ]; then rc=$r; STAGE_NOTE+="$name rc $r; "; fi
  done
  STAGE_NOTE+="$(grep -c -E '"bench": ?"(weight_sync|kernels_gpu)"' "$OUT/bench.jsonl") lines"
  return $rc
}

stage_rollout_bench() {
  local budget rc
  budget=$(limit 10)
  echo "=== rollout_gpu.py $(date -u +%FT%TZ) (--time-budget $budget)" >>"$LOG_RUN"
  PYTHONUNBUFFERED=1 timeout --kill-after=15 "$((budget + 5))" "$PY" bench/rollout_gpu.py \
    --tandem-bench "$BUILD_DIR/bench/rollout_gpu" --time-budget "$budget" >>"$OUT/bench.jsonl" 2>>"$LOG_RUN"
  rc=$?
  [ -x "$BUILD_DIR/bench/rollout_gpu" ] || STAGE_NOTE="no $BUILD_DIR/bench/rollout_gpu yet: transformers only"
  return $rc
}

# ---------------------------------------------------------------------------------------
say "stages=$STAGES budget=${BUDGET}s prefix=$PREFIX build=$BUILD_DIR out=$OUT"
if ! want deps && [ -f "$PREFIX/env.sh" ]; then source "$PREFIX/env.sh"; fi
run_stage deps stage_deps
if want configure; then
  run_stage configure stage_configure
else
  detect  # later stages still need PATH/CUDA and the torch prefix
  # shellcheck disable=SC1091
  [ -f "$BUILD_DIR/device_env.sh" ] && source "$BUILD_DIR/device_env.sh"
  write_env_txt
fi
run_stage build stage_build
run_stage test stage_test
run_stage compare stage_compare
run_stage cpp_bench stage_cpp_bench
run_stage rollout_bench stage_rollout_bench
write_summary

# Keep every file the device tool brings back under its 16 MiB limit.
for f in "$OUT"/*; do
  if [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt $((15 * 1024 * 1024)) ]; then
    { head -c $((5 * 1024 * 1024)) "$f"; printf '\n[... cut by device_build.sh ...]\n'; tail -c $((9 * 1024 * 1024)) "$f"; } >"$f.cut" && mv "$f.cut" "$f"
  fi
done

echo
echo "stage              status    seconds  note"
for i in "${!S_NAMES[@]}"; do
  printf '%-18s %-9s %7s  %s\n' "${S_NAMES[$i]}" "${S_STATUS[$i]}" "${S_SECONDS[$i]}" "${S_NOTE[$i]:0:150}"
done
[ -s "$OUT/hf_compare.jsonl" ] && "$PY" - "$OUT/hf_compare.jsonl" <<'EOF'
import json, sys
print("-- hf_compare")
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("check") == "hf_compare" and "max_abs_logprob_diff" in r:
        m = r.get("first_greedy_mismatch")
        print(f"{r['model']:13} {r['dtype']:5} prompt {r['prompt']}  max|dlogp| {r['max_abs_logprob_diff']:.2e}"
              f" (tol {r['tolerance']:g}, HF itself {r['peer_max_abs_logprob_diff']:.2e})"
              f"  greedy {'same' if m is None else 'differs at %d (margin %.2e)' % (m['index'], m['margin'])}"
              f"  {'PASS' if r['pass'] else 'FAIL'}")
    else:
        print(json.dumps(r)[:300])
EOF
[ -s "$OUT/bench.jsonl" ] && "$PY" - "$OUT/bench.jsonl" <<'EOF'
import json, sys
print("-- bench")
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("bench") == "rollout_gpu_ratio":
        f = lambda v, spec: format(v, spec) if isinstance(v, (int, float)) else "-"
        print(f"{r['model']:12} {r['phase']:8} batch {f(r.get('batch'), 'd'):>4}  ours {f(r.get('ours_tokens_per_s'), '.0f'):>9} tok/s"
              f"  HF {f(r.get('hf_tokens_per_s'), '.0f'):>9}  ratio {f(r.get('ours_over_hf'), '.2f'):>6}"
              f"  roofline {f(r.get('roofline_fraction'), '.3f')}")
    elif r.get("bench") == "copy_bandwidth":
        print(f"copy bandwidth {r['tb_per_s']:.2f} TB/s")
    elif "skipped" in r or "error" in r:
        print(json.dumps(r)[:200])
    elif r.get("bench") == "weight_sync" and "gb_per_s" in r:
        print(f"weight_sync {r.get('transport')} {r.get('bytes')} B: {r['gb_per_s']:.2f} GB/s")
EOF
grep -E '^(FAILED: |.*error:)' "$LOG_BUILD" | head -5
ok=$(grep -c '"ok":true' "$OUT/summary.json")
say "total $(elapsed) s; $( [ "$ok" = 1 ] && echo "all stages passed" || echo "NOT all stages passed: see summary.json")"
[ "$ok" = 1 ]
