#!/usr/bin/env python3
"""ptxas resource gate: fails when a CUDA kernel spills, uses local memory, draws a ptxas
warning, or exceeds its register / static shared memory budget.

Why: a spill or a few extra registers rarely break a test, they just make a kernel slower
(local memory traffic, lower occupancy), and nobody notices until a benchmark drifts. The
budgets in kernels/resource_budgets.json make such a change a visible, reviewed edit.

Prints one JSON line per kernel instantiation on stdout, then a JSON summary line; each
failure also goes to stderr as one readable line. Exit status: 0 clean, 1 any failure,
2 bad arguments or budget file, 77 (Meson's skip) when nvcc is not installed.
See README.md for how to run it and how to update the budgets.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import shutil
import sys
import time

sys.dont_write_bytecode = True  # Meson runs this from the source tree: leave no __pycache__
import ptxas_report  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
BUDGET_KEYS = {"max_registers", "max_static_smem_bytes"}
REGISTER_ALLOCATION_STEP = 8  # sm_90 allocates registers per thread in steps of 8


def main():
    args = parse_args()
    if shutil.which(args.nvcc) is None:
        print(f"SKIP: nvcc not found at '{args.nvcc}' (pass --nvcc)", file=sys.stderr)
        return 77
    budgets = load_budgets(args.budgets)
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        reports = pool.map(lambda source: ptxas_report.compile_and_report(
            args.nvcc, source, args.root, args.nvcc_flag), args.sources)
        if args.suggest_budgets:
            return print_suggested_budgets(list(reports), budgets)
        failures = kernel_count = 0
        for source, report in zip(args.sources, reports):
            kernel_count += len(report.kernels)
            failures += check_file(display_path(source, args.root), report, budgets,
                                   display_path(args.budgets, args.root))
    if kernel_count == 0 and failures == 0:
        print("FAIL no kernel found in any file: is ptxas's report format still understood?",
              file=sys.stderr)
        failures += 1
    print(json.dumps({"summary": "ptxas_gate", "files": len(args.sources),
                      "kernel_instantiations": kernel_count, "failures": failures,
                      "seconds": round(time.monotonic() - start, 1)}))
    return 1 if failures else 0


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", type=pathlib.Path, help=".cu files")
    parser.add_argument("--nvcc", default="/usr/local/cuda/bin/nvcc")
    parser.add_argument("--budgets", type=pathlib.Path,
                        default=REPO_ROOT / "kernels" / "resource_budgets.json")
    parser.add_argument("--root", type=pathlib.Path, default=REPO_ROOT,
                        help="include root (-I), also the base of the printed paths")
    parser.add_argument("--nvcc-flag", action="append", default=[],
                        help="extra nvcc flag, e.g. --nvcc-flag=-maxrregcount=24 (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--suggest-budgets", action="store_true",
                        help="print a budget file from today's measurements instead of checking")
    return parser.parse_args()


def load_budgets(path):
    """Keys starting with '_' are comments; every other key is a kernel's base name."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        bad_budget_file(f"cannot read {path}: {e}")
    for name, budget in raw.items():
        if not name.startswith("_") and (not isinstance(budget, dict) or set(budget) != BUDGET_KEYS
                                         or not all(isinstance(v, int) for v in budget.values())):
            bad_budget_file(f"{path}: '{name}' must be "
                            f"{{\"max_registers\": int, \"max_static_smem_bytes\": int}}")
    return raw


def bad_budget_file(message):
    print(f"ptxas_gate: bad budget file: {message}", file=sys.stderr)
    sys.exit(2)


def check_file(path, report, budgets, budget_path):
    """Prints the file's kernel lines and failures; returns the number of failures."""
    if report.error:
        return fail(f"{path}: nvcc failed:\n{report.error}")
    failures = 0
    for kernel in report.kernels:
        problems = kernel_problems(kernel, budgets, budget_path)
        print(json.dumps({"file": path, "kernel": kernel.name, "base_name": kernel.base_name,
                          "template_args": kernel.template_args, "registers": kernel.registers,
                          "static_smem_bytes": kernel.static_smem_bytes,
                          "stack_bytes": kernel.stack_bytes,
                          "spill_store_bytes": kernel.spill_store_bytes,
                          "spill_load_bytes": kernel.spill_load_bytes,
                          "barriers": kernel.barriers, "ok": not problems}))
        failures += sum(fail(f"{path}: {kernel.name}: {p}") for p in problems)
    names = {k.mangled: k.name for k in report.kernels}
    for mangled, message in report.warnings:
        where = names.get(mangled, mangled or "(file)")
        message = message.replace(mangled, where) if mangled else message
        failures += fail(f"{path}: {where}: ptxas warning: {message}")
    return failures


def kernel_problems(kernel, budgets, budget_path):
    if not kernel.complete:
        return ["ptxas report incomplete (no 'Used N registers' line): update ptxas_report.py"]
    problems = []
    if kernel.spill_store_bytes or kernel.spill_load_bytes:
        problems.append(f"spills {kernel.spill_store_bytes} bytes stores / "
                        f"{kernel.spill_load_bytes} bytes loads (limit 0)")
    if kernel.stack_bytes:
        problems.append(f"{kernel.stack_bytes} bytes stack frame, i.e. local memory (limit 0)")
    budget = budgets.get(kernel.base_name)
    if budget is None:
        suggestion = json.dumps({kernel.base_name: suggested_budget([kernel])})
        return problems + [f"no budget for '{kernel.base_name}' in {budget_path}: add it "
                           f"(this instantiation alone needs {suggestion}; --suggest-budgets "
                           f"covers all of them, see README.md)"]
    if kernel.registers > budget["max_registers"]:
        problems.append(f"{kernel.registers} registers > budget {budget['max_registers']}")
    if kernel.static_smem_bytes > budget["max_static_smem_bytes"]:
        problems.append(f"{kernel.static_smem_bytes} bytes static smem > budget "
                        f"{budget['max_static_smem_bytes']}")
    return problems


def suggested_budget(instantiations):
    """Registers: the next multiple of 8 above the maximum (1 to 8 registers of headroom,
    at most one allocation step); static smem: the exact maximum, since it only changes
    when someone edits a tile size, and that edit should touch the budget too."""
    registers = max(k.registers for k in instantiations)
    return {"max_registers": (registers // REGISTER_ALLOCATION_STEP + 1) * REGISTER_ALLOCATION_STEP,
            "max_static_smem_bytes": max(k.static_smem_bytes for k in instantiations)}


def print_suggested_budgets(reports, budgets):
    by_base_name = {}
    for report in reports:
        if report.error:
            return fail(f"nvcc failed:\n{report.error}")
        for kernel in report.kernels:
            by_base_name.setdefault(kernel.base_name, []).append(kernel)
    comments = {n: b for n, b in budgets.items() if n.startswith("_")}
    measured = {n: suggested_budget(ks) for n, ks in by_base_name.items()}
    kept = {n: b for n, b in budgets.items() if not n.startswith("_") and n not in measured}
    if kept:
        print(f"kept budgets of kernels not measured (delete them if the kernels are gone): "
              f"{sorted(kept)}", file=sys.stderr)
    # One line per entry, so a budget change is a one-line diff.
    entries = list(comments.items()) + sorted({**kept, **measured}.items())
    print("{\n" + ",\n".join(f"  {json.dumps(n)}: {json.dumps(b)}" for n, b in entries) + "\n}")
    return 0


def display_path(source, root):
    try:
        return str(source.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(source)


def fail(message):
    print(f"FAIL {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
