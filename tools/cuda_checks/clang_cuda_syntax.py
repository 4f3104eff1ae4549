#!/usr/bin/env python3
"""Second CUDA front end: parses each .cu file with clang (host and sm_90 device sides)
under -Wall -Wextra -Werror.

Why: nvcc's front end warns about little (no -Wsign-compare, for one) and our build does
not make its warnings errors, so code only nvcc has seen collects bugs and corner cases
that stop it building with clang-based CUDA toolchains. clang also checks the
__host__/__device__ call rules separately on the host and the device side.

Exit status: 0 clean, 1 any file rejected, 77 (Meson's skip) with the reason when clang
or the CUDA toolkit is missing.
"""

import argparse
import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    args = parse_args()
    if shutil.which(args.clang) is None:
        return skip(f"{args.clang} is not installed (Debian bookworm-security: "
                    f"apt-get install clang-22)")
    if not (args.cuda_path / "include" / "cuda_runtime.h").is_file():
        return skip(f"no CUDA toolkit at {args.cuda_path} (pass --cuda-path)")
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = pool.map(lambda source: parse_with_clang(args, source), args.sources)
        rejected = 0
        for source, (returncode, output) in zip(args.sources, results):
            print(f"{'ok  ' if returncode == 0 else 'FAIL'} {source}")
            if returncode != 0:
                rejected += 1
                print(output, end="")
    print(f"clang_cuda_syntax: {len(args.sources)} files, {rejected} rejected "
          f"({time.monotonic() - start:.1f} s)")
    return 1 if rejected else 0


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", type=pathlib.Path, help=".cu files")
    parser.add_argument("--clang", default="clang++-22")
    parser.add_argument("--cuda-path", type=pathlib.Path, default=pathlib.Path("/usr/local/cuda"))
    parser.add_argument("--root", type=pathlib.Path, default=REPO_ROOT, help="include root (-I)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    return parser.parse_args()


def parse_with_clang(args, source):
    # -Wno-unknown-cuda-version: clang 22 predates CUDA 13 and says so on every file; it
    # still parses the headers correctly, and nothing else is silenced.
    cmd = [args.clang, "-x", "cuda", "-fsyntax-only", f"--cuda-path={args.cuda_path}",
           "--cuda-gpu-arch=sm_90", "-std=c++17", "-Wall", "-Wextra", "-Werror",
           "-Wno-unknown-cuda-version", f"-I{args.root}", "-DTANDEM_WITH_CUDA=1", str(source)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    return run.returncode, f"$ {' '.join(cmd)}\n{run.stdout}{run.stderr}"


def skip(reason):
    print(f"SKIP: {reason}")
    return 77


if __name__ == "__main__":
    sys.exit(main())
