#!/usr/bin/env python3
"""Self-tests of the CUDA checks: each tiny .cu file here must pass or fail for exactly the
expected reason. A gate that cannot fail is worthless, and one that fails for the wrong
reason (say, a parse error read as a spill) is not much better, so every FAIL line a check
prints must match one of the case's expected patterns, and every pattern must match.

Exit status: 0 all expectations hold, 1 otherwise, 77 when neither nvcc nor clang++-22
is available (each check's own skip is reported per case).
"""

import argparse
import pathlib
import re
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77


def cases(nvcc, cuda_path):
    """(name, command, expected exit status, FAIL-line patterns, patterns anywhere in output)"""
    def gate(*args):
        return [HERE.parent / "ptxas_gate.py", "--nvcc", nvcc, *args]

    def clang(*args):
        return [HERE.parent / "clang_cuda_syntax.py", "--cuda-path", cuda_path, *args]

    return [
        ("gate passes a clean templated kernel",
         gate("--budgets", HERE / "test_budgets.json", HERE / "clean_kernel.cu"), 0, [],
         [r'"kernel": "clean_scale_kernel<float>", "base_name": "clean_scale_kernel"',
          r'"kernel": "clean_scale_kernel<double>", "base_name": "clean_scale_kernel"']),
        ("gate fails a dynamically indexed local array",
         gate("--budgets", HERE / "test_budgets.json", HERE / "local_memory_kernel.cu"), 1,
         [r"local_memory_kernel: \d+ bytes stack frame, i\.e\. local memory \(limit 0\)",
          r"local_memory_kernel: ptxas warning: Local memory used for function "
          r"'local_memory_kernel'"], []),
        ("gate fails spills under -maxrregcount=24",
         gate("--budgets", HERE / "test_budgets.json", "--nvcc-flag=-maxrregcount=24",
              HERE / "register_spill_kernel.cu"), 1,
         [r"register_spill_kernel: spills \d+ bytes stores / \d+ bytes loads \(limit 0\)",
          r"register_spill_kernel: \d+ bytes stack frame",
          r"register_spill_kernel: ptxas warning: Registers are spilled",
          r"register_spill_kernel: ptxas warning: Local memory used"], []),
        ("gate passes the spill kernel without the register cap",
         gate("--budgets", HERE / "test_budgets.json", HERE / "register_spill_kernel.cu"), 0,
         [], []),
        ("gate fails the register and the static smem budget",
         gate("--budgets", HERE / "test_budgets.json", HERE / "over_budget_kernel.cu"), 1,
         [r"register_heavy_kernel: \d+ registers > budget 24",
          r"shared_memory_heavy_kernel: 8192 bytes static smem > budget 4096"], []),
        ("gate fails a kernel with no budget and says what to add",
         gate("--budgets", HERE / "empty_budgets.json", HERE / "clean_kernel.cu"), 1,
         [r"clean_scale_kernel<(float|double)>: no budget for 'clean_scale_kernel' .*add it"],
         []),
        ("clang accepts the clean kernel", clang(HERE / "clean_kernel.cu"), 0, [], []),
        ("clang rejects sign-compare and an unused variable",
         clang(HERE / "clang_rejects_kernel.cu"), 1,
         [r"clang_rejects_kernel\.cu"],
         [r"\[-Werror,-Wsign-compare\]", r"\[-Werror,-Wunused-variable\]"]),
    ]


def run_case(command, expected_status, fail_patterns, output_patterns):
    """Returns None when the expectation holds, 'skip: ...' or an error message otherwise."""
    run = subprocess.run([sys.executable, *map(str, command)], capture_output=True, text=True)
    output = run.stdout + run.stderr
    if run.returncode == SKIP:
        return "skip: " + output.strip()
    if run.returncode != expected_status:
        return f"exit status {run.returncode}, expected {expected_status}\n{output}"
    fail_lines = [line for line in output.splitlines() if line.startswith("FAIL")]
    unexpected = [line for line in fail_lines
                  if not any(re.search(p, line) for p in fail_patterns)]
    missing = [p for p in fail_patterns if not any(re.search(p, line) for line in fail_lines)]
    missing += [p for p in output_patterns if not re.search(p, output)]
    if unexpected or missing:
        return f"unexpected FAIL lines: {unexpected}\nmissing patterns: {missing}\n{output}"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nvcc", default="/usr/local/cuda/bin/nvcc")
    parser.add_argument("--cuda-path", default="/usr/local/cuda", help="toolkit clang uses")
    args = parser.parse_args()
    all_cases = cases(args.nvcc, args.cuda_path)
    broken = skipped = 0
    for name, *case in all_cases:
        problem = run_case(*case)
        if problem is None:
            print(f"ok   {name}")
        elif problem.startswith("skip: "):
            skipped += 1
            print(f"SKIP {name}: {problem[6:]}")
        else:
            broken += 1
            print(f"BAD  {name}: {problem}")
    print(f"cuda_checks self-tests: {len(all_cases) - broken - skipped} ok, {broken} bad, "
          f"{skipped} skipped")
    if broken:
        return 1
    return SKIP if skipped == len(all_cases) else 0


if __name__ == "__main__":
    sys.exit(main())
