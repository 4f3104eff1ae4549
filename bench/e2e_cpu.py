#!/usr/bin/env python3
"""End-to-end CPU benchmark: the quickstart run through the `tandem` binary.

Runs configs/quickstart.yaml with 1 and then 2 rollout workers, in each placement, and
prints one JSON line per configuration (wall time, warm-up time, per-phase step times,
phase shares, response tokens/s, reward at the start and the end), then one JSON line
with the 2-worker figures over the 1-worker ones measured in the same run (the reference).

    python3 bench/e2e_cpu.py [--tandem build/controller/tandem] [--steps 60]

Standard library only, so it runs wherever the binary does.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ["rollout_s", "reward_s", "train_s", "sync_s", "step_s"]
# The first steps pay for process start-up and first-touch allocations (fresh shared-memory
# segments, allocator growth); they say nothing about the steady-state step.
WARMUP_STEPS_SKIPPED = 3
REWARD_WINDOW = 10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tandem", default=os.path.join(REPO_ROOT, "build/controller/tandem"),
                        help="tandem binary (copied to a temp dir before use)")
    parser.add_argument("--config", default=os.path.join(REPO_ROOT, "configs/quickstart.yaml"))
    parser.add_argument("--steps", type=int, default=60, help="RL steps per run")
    parser.add_argument("--workers", default="1,2",
                        help="rollout worker counts, comma separated; the first is the reference")
    parser.add_argument("--placements", default="colocated,disaggregated",
                        help="placements, comma separated")
    args = parser.parse_args()
    if args.steps <= WARMUP_STEPS_SKIPPED:
        parser.error(f"--steps must exceed the {WARMUP_STEPS_SKIPPED} skipped warm-up steps")
    return args


def copy_binary(tandem, into_dir):
    """Copy the binary so that a concurrent rebuild of build/ cannot swap it mid-run
    (the controller starts its workers from its own executable)."""
    copy = os.path.join(into_dir, "tandem")
    shutil.copy2(tandem, copy)
    return copy


def run_tandem(binary, config, placement, workers, steps, run_dir):
    """Run one training job to completion; return its wall time in seconds."""
    command = [
        binary, "run", config, "--run-dir", run_dir,
        "--set", f"rollout.workers={workers}",
        "--set", f"placement={placement}",
        "--set", f"experiment.steps={steps}",
        # Checkpoints are I/O outside the steps; keep them out of wall_s.
        "--set", "experiment.checkpoint_every=0",
        "--set", "logging.console=quiet",
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"e2e_cpu: {' '.join(command)} exited with {done.returncode}")
    return wall_s


def read_jsonl(path):
    with open(path) as lines:
        return [json.loads(line) for line in lines if line.strip()]


def read_sft_metrics(run_dir):
    # A config without an sft: section writes no sft_metrics.jsonl; its warm-up costs 0 s.
    path = os.path.join(run_dir, "sft_metrics.jsonl")
    return read_jsonl(path) if os.path.exists(path) else []


def response_tokens(row):
    # metrics.jsonl gives the count of responses and their mean length, not the total.
    return row["response/count"] * row["response/length_mean"]


def summarize(placement, workers, steps, wall_s, rows, sft_rows):
    """One configuration's figures from its metrics.jsonl and sft_metrics.jsonl rows."""
    if len(rows) != steps:
        raise SystemExit(f"e2e_cpu: expected {steps} steps in metrics.jsonl, found {len(rows)}")
    measured = rows[WARMUP_STEPS_SKIPPED:]
    summary = {
        "bench": "e2e_cpu",
        "placement": placement,
        "rollout_workers": workers,
        "steps": steps,
        "steps_measured": len(measured),
        "wall_s": round(wall_s, 3),
        "warmup_s": round(sum(row["time/step_s"] for row in sft_rows), 3),
        "warmup_steps": len(sft_rows),
        # The 1-minute load average as the run ends: on a shared machine it tells whether
        # other work (a build) competed for the cores during this configuration.
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    for phase in PHASES:
        values = [row["time/" + phase] for row in measured]
        summary[f"median_{phase}"] = round(statistics.median(values), 5)
        summary[f"mean_{phase}"] = round(statistics.fmean(values), 5)
    # Shares and rates from totals over the measured steps, so a slow step weighs by its
    # length (the throughput a user waits through), not as one vote among many.
    step_total = sum(row["time/step_s"] for row in measured)
    for phase in PHASES[:-1]:
        summary[f"share_{phase[:-2]}"] = round(sum(row["time/" + phase] for row in measured) / step_total, 4)
    # What the four phases do not cover: advantages, batching, metrics, controller messaging
    # (from the unrounded totals: 1 minus the rounded shares showed rounding error as -0.0001).
    phases_total = sum(row["time/" + p] for row in measured for p in PHASES[:-1])
    summary["share_other"] = round((step_total - phases_total) / step_total, 4)
    tokens = sum(response_tokens(row) for row in measured)
    summary["tokens_per_s_step"] = round(tokens / step_total, 1)
    summary["tokens_per_s_rollout"] = round(tokens / sum(row["time/rollout_s"] for row in measured), 1)
    # Reward over all RL steps: learning progress, not speed, so no warm-up is skipped.
    summary["reward_first10"] = round(statistics.fmean(r["reward/mean"] for r in rows[:REWARD_WINDOW]), 4)
    summary["reward_last10"] = round(statistics.fmean(r["reward/mean"] for r in rows[-REWARD_WINDOW:]), 4)
    return summary


def ratios(summaries, reference_workers, workers):
    """Each placement's `workers` figures over its `reference_workers` figures."""
    by_key = {(s["placement"], s["rollout_workers"]): s for s in summaries}
    line = {"bench": "e2e_cpu", "ratio": f"{workers} rollout workers / {reference_workers}"}
    for placement in dict.fromkeys(s["placement"] for s in summaries):
        new, ref = by_key[(placement, workers)], by_key[(placement, reference_workers)]
        line[placement] = {
            key: round(new[key] / ref[key], 3)
            for key in ("median_step_s", "median_rollout_s", "tokens_per_s_step",
                        "tokens_per_s_rollout", "wall_s")
        }
    return line


def main():
    args = parse_args()
    workers_list = [int(w) for w in args.workers.split(",")]
    placements = args.placements.split(",")
    summaries = []
    with tempfile.TemporaryDirectory(prefix="tandem-e2e-") as tmp:
        binary = copy_binary(args.tandem, tmp)
        for placement in placements:
            for workers in workers_list:
                run_dir = os.path.join(tmp, f"{placement}-w{workers}")
                wall_s = run_tandem(binary, args.config, placement, workers, args.steps, run_dir)
                summary = summarize(placement, workers, args.steps, wall_s,
                                    read_jsonl(os.path.join(run_dir, "metrics.jsonl")),
                                    read_sft_metrics(run_dir))
                summaries.append(summary)
                print(json.dumps(summary), flush=True)
    for workers in workers_list[1:]:
        print(json.dumps(ratios(summaries, workers_list[0], workers)), flush=True)


if __name__ == "__main__":
    main()
