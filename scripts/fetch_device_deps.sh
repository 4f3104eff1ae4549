#!/usr/bin/env bash
# Downloads (here, on Debian 12) the .deb files that the lent GPU machine lacks into
# .deps/debs/ (ignored by git; named in the device tool's `carry`), for
# scripts/device_build.sh to unpack into a prefix there. libtorch is not carried: the
# GPU machine's Python venv has a CUDA one. Safe to run again: it downloads only what is
# missing and removes .debs of other versions.
#
#   scripts/fetch_device_deps.sh            # then carry [".deps"] in the device call
#
# What is fetched: every library scripts/install_deps.sh installs that the build links or
# includes (ZeroMQ + cppzmq, Cap'n Proto + its compiler, yaml-cpp, Eigen, doctest,
# nlohmann-json, fmt, CLI11, Gloo, PCRE2, ICU, prometheus-cpp, cpp-httplib, protobuf + protoc), the runtime libraries these need that a
# bare machine may lack (libsodium, OpenPGM, NORM, libbsd, Kerberos' GSSAPI, hiredis,
# ibverbs, OpenSSL, zlib), and pkgconf in case the machine has no pkg-config.
# Not fetched: compilers, libc, libstdc++ (the machine's own, newer), libtorch, CUDA, NCCL.
set -euo pipefail
cd "$(dirname "$0")/.."

dest=.deps/debs
packages=(
  # ZeroMQ and its runtime libraries (libzmq5's Depends, recursively, minus libc/libstdc++)
  libzmq3-dev libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 libssl3
  cppzmq-dev
  # Cap'n Proto: headers, libraries, the capnp compiler and its C++ plugin
  capnproto libcapnp-dev libcapnp-0.9.2 zlib1g
  libyaml-cpp-dev libyaml-cpp0.7
  libeigen3-dev doctest-dev nlohmann-json3-dev libcli11-dev
  libfmt-dev libfmt9
  # Gloo (weight_sync's collective transport) and what libgloo0 loads
  libgloo-dev libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libicu-dev libicu72
  # Boost.Context: tools/cudasim's fibers (the cudasim suite runs on the GPU machine too)
  libboost-context-dev libboost-context1.74-dev libboost-context1.74.0 libboost1.74-dev
  # Observability: /metrics (prometheus-cpp), the dashboard and /metrics server
  # (cpp-httplib, whose header includes OpenSSL, zlib and Brotli headers), TensorBoard event
  # files (protobuf + protoc, carried as a matching pair even where the machine has its own)
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev zlib1g-dev libbrotli-dev libbrotli1
  protobuf-compiler libprotoc32 libprotobuf32 libprotobuf-lite32 libprotobuf-dev
  # The sandbox for the model's code (agent/): libseccomp (bwrap is needed only to run it)
  libseccomp-dev libseccomp2 bubblewrap
  # pkg-config (pkgconf), used only where the machine has none
  pkgconf-bin libpkgconf3
)

if ! apt-cache show --no-all-versions libzmq5 >/dev/null 2>&1; then
  echo "fetch_device_deps: apt lists missing; running apt-get update" >&2
  apt-get update -qq
fi

mkdir -p "$dest"
# The exact file names apt would download now (name_version_arch.deb, ':' escaped as %3a).
wanted=()
for p in "${packages[@]}"; do
  line=$(apt-cache show --no-all-versions "$p" | awk '/^Filename:/{print $2; exit}')
  if [ -z "$line" ]; then echo "fetch_device_deps: no package $p" >&2; exit 1; fi
  wanted+=("$(basename "$line")")
done

missing=()
for i in "${!packages[@]}"; do
  [ -s "$dest/${wanted[$i]}" ] || missing+=("${packages[$i]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fetch_device_deps: downloading ${missing[*]}"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "${missing[@]}")
  # apt names a file with its version's epoch ("1%3a1.2.13"); keep the archive's own name
  # (no epoch, no '%'), which is what `wanted` holds.
  for p in "${missing[@]}"; do
    for i in "${!packages[@]}"; do
      [ "${packages[$i]}" = "$p" ] || continue
      mv "$tmp/${p}_"*.deb "$dest/${wanted[$i]}"
    done
  done
fi

# Drop .debs that are not in the list (an older version, a removed package).
for f in "$dest"/*.deb; do
  keep=0
  for w in "${wanted[@]}"; do [ "$(basename "$f")" = "$w" ] && keep=1 && break; done
  if [ $keep -eq 0 ]; then echo "fetch_device_deps: removing stale $(basename "$f")"; rm -f "$f"; fi
done

for i in "${!packages[@]}"; do
  if [ ! -s "$dest/${wanted[$i]}" ]; then echo "fetch_device_deps: ${wanted[$i]} missing after download" >&2; exit 1; fi
done

total=$(du -cb "$dest"/*.deb | tail -1 | cut -f1)
echo "fetch_device_deps: ${#packages[@]} packages in $dest, $((total / 1024 / 1024)) MiB ($total bytes)"
if command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1; then
  # What travels besides: tracked and untracked-but-not-ignored files.
  tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  echo "fetch_device_deps: with the working tree ($((tree / 1024 / 1024)) MiB) the device call carries" \
       "$(((total + tree) / 1024 / 1024)) MiB of its 64 MiB"
fi
# The device tool carries at most 64 MiB together with the working tree.
if [ "$total" -gt $((48 * 1024 * 1024)) ]; then
  echo "fetch_device_deps: over 48 MiB: too close to the device tool's 64 MiB carry limit" >&2
  exit 1
fi
