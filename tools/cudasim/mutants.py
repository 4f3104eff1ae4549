#!/usr/bin/env python3
"""The mutation check of the GPU test tooling: plants one bug of each kind the simulator
and the CUDA checks exist to catch, in a scratch checkout, and shows the suite failing.

    tools/cudasim/mutants.py [--only NAME ...] [--keep DIR]

Builds HEAD (committed state) in a temporary git worktree with its own build directory;
for each mutant: applies one text edit, rebuilds the target that should catch it, runs it,
and expects a failure of the stated kind. Prints one line per mutant and a summary; exits
1 if any mutant survives. Takes 10-20 minutes on 2 cores; not part of the test suite.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass


@dataclass
class Mutant:
    name: str
    bug: str
    path: str
    old: str
    new: str
    target: str          # ninja target to build ("" when the build itself must fail)
    command: list        # run in the build directory
    expect: str          # regular expression the failing output must contain
    env: dict = None


KERNELS = "tools/cudasim/test_kernels_cudasim_{}"
BACKEND = "tools/cudasim/test_rollout_backends_cudasim"

MUTANTS = [
    Mutant("missing_barrier_tsan", "missing __syncthreads between writing and reading shared memory",
           "kernels/device_math.cuh", "  if (lane == 0) scratch[warp] = v;\n  __syncthreads();\n  return warp_sum(lane < warps ? scratch[lane] : 0.0f);\n}\n__device__ __forceinline__ float block_max",
           "  if (lane == 0) scratch[warp] = v;\n  return warp_sum(lane < warps ? scratch[lane] : 0.0f);\n}\n__device__ __forceinline__ float block_max",
           KERNELS.format("tsan"), [KERNELS.format("tsan"), "-tc=rms_norm*"], r"ThreadSanitizer: data race"),
    Mutant("missing_barrier_orders", "the same missing __syncthreads, plain build, three thread orders",
           "kernels/device_math.cuh", "  if (lane == 0) scratch[warp] = v;\n  __syncthreads();\n  return warp_sum(lane < warps ? scratch[lane] : 0.0f);\n}\n__device__ __forceinline__ float block_max",
           "  if (lane == 0) scratch[warp] = v;\n  return warp_sum(lane < warps ? scratch[lane] : 0.0f);\n}\n__device__ __forceinline__ float block_max",
           KERNELS.format("plain"),
           ["python3", "../tools/cudasim/run_variants.py", "--compare", KERNELS.format("plain"), "--run", "forward,0xFF",
            "--run", "reverse,0x7F", "--arg=-tc=rms_norm*"], r"FAILED"),
    Mutant("divergent_shuffle", "a warp shuffle under a lane-dependent condition",
           "kernels/device_math.cuh", "for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);",
           "for (int offset = 16; offset > 0; offset /= 2) if (threadIdx.x % 32 < 16) v += __shfl_xor_sync(0xffffffffu, v, offset);",
           KERNELS.format("plain"), [KERNELS.format("plain"), "-tc=rms_norm*"], r"kernel fault: .*(__shfl_xor_sync|deadlock)"),
    Mutant("shared_off_by_one", "a __shared__ array one element short",
           "kernels/norm_act.cu", "__shared__ float scratch[32];", "__shared__ float scratch[31];",
           KERNELS.format("asan"), [KERNELS.format("asan"), "-tc=rms_norm*"], r"AddressSanitizer: heap-buffer-overflow"),
    Mutant("dynamic_shared_overflow", "dynamic shared memory sized half what the kernel uses",
           "kernels/paged_decode.cu", "static_cast<size_t>(parts) * sizeof(float)", "static_cast<size_t>(parts) * sizeof(float) / 2",
           KERNELS.format("asan"), [KERNELS.format("asan"), "-tc=paged decode*"], r"AddressSanitizer: heap-buffer-overflow"),
    Mutant("unwritten_shared", "a shared partial sum that is never written, read anyway",
           "kernels/device_math.cuh", "  if (lane == 0) scratch[warp] = v;\n  __syncthreads();\n  return warp_sum(lane < warps ? scratch[lane] : 0.0f);\n}\n__device__ __forceinline__ float block_max",
           "  if (lane == 0 && warp > 0) scratch[warp] = v;\n  __syncthreads();\n  return warp_sum(lane < warps ? scratch[lane] : 0.0f);\n}\n__device__ __forceinline__ float block_max",
           KERNELS.format("plain"), [KERNELS.format("plain"), "-tc=rms_norm*"], r"ERROR: rms_norm", {"CUDASIM_POISON": "0x7F"}),
    Mutant("misaligned_pack", "128-bit packs taken for pointers that are not 16-byte aligned",
           "kernels/norm_act.cu", "    if (!is_aligned(p, 16)) return false;", "    if (!is_aligned(p, 4)) return false;",
           KERNELS.format("plain"), [KERNELS.format("plain"), "-tc=rms_norm*"], r"misaligned load_pack|misaligned store_pack"),
    Mutant("missing_stream_sync", "the CUDA backend reads logits without waiting for its stream",
           "rollout/cuda_backend.cpp", '  cuda_check(cudaStreamSynchronize(stream_.get()), "forward step", "cudaStreamSynchronize");',
           "", BACKEND, [BACKEND, "-tc=backend forward*"], r"ERROR"),
    Mutant("gemm_leading_dimension", "a cuBLAS leading dimension that does not match the layout",
           "rollout/cuda_backend.cpp", "static_cast<int>(in), &zero, y, y_type, static_cast<int>(out)",
           "static_cast<int>(in), &zero, y, y_type, static_cast<int>(out) - 1",
           BACKEND, [BACKEND, "-tc=backend forward*"], r"CUBLAS_STATUS_INVALID_VALUE"),
    Mutant("unhandled_construct", "a CUDA construct the rewriter does not handle (__constant__)",
           "kernels/rope.cu", "namespace tandem::kernels {", "__constant__ float kPlanted[4];\nnamespace tandem::kernels {",
           "", [], r"constructs left unhandled"),
]


def run(cmd, cwd, env=None, timeout=1800):
    start = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--keep", help="reuse/keep this scratch directory")
    args = parser.parse_args()
    repo = subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip()
    scratch = args.keep or tempfile.mkdtemp(prefix="tandem-mutants-")
    tree = os.path.join(scratch, "tree")
    if not os.path.isdir(tree):
        subprocess.check_call(["git", "-C", repo, "worktree", "add", "--detach", tree, "HEAD"])
    build = os.path.join(tree, "build")
    if not os.path.isdir(build):
        subprocess.check_call(["meson", "setup", build], cwd=tree, stdout=subprocess.DEVNULL)
    mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
    # The unmutated targets first: each mutant then rebuilds only what it touches.
    targets = sorted({m.target for m in mutants if m.target})
    code, out, secs = run(["ninja", "-C", build] + targets, tree)
    if code != 0:
        sys.exit("mutants: the unmutated build fails:\n" + out[-3000:])
    survivors = 0
    for m in mutants:
        path = os.path.join(tree, m.path)
        original = open(path).read()
        if m.old not in original:
            print(f"{m.name}: SETUP ERROR: the text to mutate is not in {m.path}")
            survivors += 1
            continue
        open(path, "w").write(original.replace(m.old, m.new, 1))
        try:
            code, out, secs = run(["ninja", "-C", build] + ([m.target] if m.target else targets), tree)
            if m.target and code == 0:
                env = dict(os.environ, TANDEM_TEST_SEED="12345", **(m.env or {}))
                code, out, secs = run(m.command, build, env)
            # A crash (killed by a signal) fails the suite as surely as a named report.
            caught = code < 0 or (code != 0 and re.search(m.expect, out) is not None)
            line = next((l for l in out.splitlines() if re.search(m.expect, l)), "").strip()[:200]
            print(f"{m.name}: {'CAUGHT' if caught else 'SURVIVED'} ({m.bug}; exit {code}, {secs:.0f} s): {line}",
                  flush=True)
            survivors += not caught
        finally:
            open(path, "w").write(original)
    print(f"mutants: {len(mutants) - survivors} of {len(mutants)} caught")
    if not args.keep:
        subprocess.call(["git", "-C", repo, "worktree", "remove", "--force", tree])
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
