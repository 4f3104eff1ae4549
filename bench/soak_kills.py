#!/usr/bin/env python3
"""Soak under random worker deaths (issue 29): a run whose workers are SIGKILLed at random,
one every --every seconds, must end with the metrics of an undisturbed run of the same
config and seed, and go on quickly after each death.

Runs the same config twice through the `tandem` binary: undisturbed (the reference), then
with a killer that, once the first step is done, sends SIGKILL every --every seconds to a
worker picked at random among the controller's children (2 rollout workers and 2 learner
ranks, disaggregated; the learners keep their state in memory, learner.snapshot). For each
kill it measures the time until metrics.jsonl next gains a row ("next step done"). Prints
JSON lines: one per role (kills, median and max next-step-done seconds, and their ratio to
the undisturbed run's median step time, measured here), then a summary (steps, kills,
restarts, whether every metric but time/ and perf/ keys equals the reference's).

    python3 bench/soak_kills.py [--steps 60] [--every 1.5] [--seed 1] [--tandem build/controller/tandem]
        [--set KEY=VALUE ...] [--snapshot-cost N]

--snapshot-cost N measures what the snapshots cost an undisturbed run: N runs with them and
N without, alternating (this machine's other load varies), the median step time of each.

--check exits 1 unless the run finished with identical metrics (tests use it; it never
judges the times, which depend on the machine).
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# builtin:small with 2 rollout workers and 2 learner ranks: steps of a few tenths of a second
# on a 2-core machine, so that a kill every 1.5 s lands every few steps.
CONFIG = """experiment: {{name: soak, seed: 7, steps: {steps}, checkpoint_every: 20, keep_checkpoints: 2}}
model: {{path: "builtin:small"}}
data: {{train: "builtin:addition1", batch_size: 8}}
sft: {{steps: 20, batch_size: 32}}
algorithm: {{group_size: 4, kl: {{coef: 0.01}}}}
rollout: {{workers: 2, max_new_tokens: 6, kv_cache_mb: 16}}
learner: {{workers: 2, micro_batch_size: 16, threads: 1, optimizer: {{lr: 1.0e-3}}}}
placement: disaggregated
launcher: {{max_restarts: 10000}}
logging: {{console: plain}}
"""


def metric_rows(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):
                rows.append(json.loads(line))
    return rows


def differences(expected, got):
    """Every metric but timings equal, step by step: the list of what differs."""
    out = []
    if len(expected) != len(got):
        out.append("rows: {} expected, {} got".format(len(expected), len(got)))
    for want, have in zip(expected, got):
        for key, value in want.items():
            if key.startswith("time/") or key.startswith("perf/"):
                continue
            if have.get(key) != value:
                out.append("step {} {}: {} expected, {} got".format(want.get("step"), key, value, have.get(key)))
    return out


def children(pid):
    """(role, rank, pid) of the controller's worker processes, from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/{}/stat".format(name)) as f:
                stat = f.read()
            with open("/proc/{}/cmdline".format(name), "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        if ppid != pid or b"worker" not in argv or b"--role" not in argv:
            continue
        role = argv[argv.index(b"--role") + 1].decode()
        rank = int(argv[argv.index(b"--rank") + 1])
        found.append((role, rank, int(name)))
    return found


def run(tandem, config, settings, run_dir, log_path, kill_every=None, rng=None):
    """One `tandem run`; with kill_every, kills a random worker that often. Returns
    (exit code, kills as (role, seconds to the next new metrics row or None), wall seconds)."""
    start = time.monotonic()
    with open(log_path, "w") as log:
        command = [tandem, "run", config, "--run-dir", run_dir]
        for setting in settings:
            command += ["--set", setting]
        controller = subprocess.Popen(command, stdout=log, stderr=log)
    kills = []  # [role, kill time, seconds to the next row]
    row_count = 0
    next_kill = None
    while controller.poll() is None:
        time.sleep(0.005)
        rows = metric_rows(run_dir)
        now = time.monotonic()
        # A new row: each kill still waiting is answered by it. A learner's recovery cuts
        # rows back first, so "new" is any change of the row count after the kill.
        if len(rows) != row_count:
            row_count = len(rows)
            for kill in kills:
                if kill[2] is None and row_count > 0:
                    kill[2] = now - kill[1]
        if kill_every is None or not rows:
            continue
        if next_kill is None:
            next_kill = now + kill_every
        if now >= next_kill:
            workers = children(controller.pid)
            if workers:
                role, rank, pid = rng.choice(workers)
                try:
                    os.kill(pid, signal.SIGKILL)
                    kills.append([role, now, None])
                except ProcessLookupError:
                    pass
            next_kill = now + kill_every
    return controller.returncode, kills, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=float, default=1.5, help="seconds between kills")
    parser.add_argument("--seed", type=int, default=1, help="picks the workers to kill")
    parser.add_argument("--tandem", default=os.path.join(REPO_ROOT, "build", "controller", "tandem"))
    parser.add_argument("--check", action="store_true", help="exit 1 unless the metrics are identical")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config settings for both runs (learner.snapshot=off: recovery from checkpoints)")
    parser.add_argument("--snapshot-cost", type=int, default=0, metavar="N",
                        help="also N undisturbed runs with learner.snapshot memory and N with off, alternating: the "
                             "median step time with snapshots over the one without")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="tandem-soak-")
    config = os.path.join(work, "config.yaml")
    with open(config, "w") as f:
        f.write(CONFIG.format(steps=args.steps))

    code, _, reference_wall = run(args.tandem, config, args.set, os.path.join(work, "reference"), os.path.join(work, "reference.log"))
    if code != 0:
        sys.exit("the undisturbed run failed (exit {}): see {}".format(code, os.path.join(work, "reference.log")))
    reference = metric_rows(os.path.join(work, "reference"))
    step_s = statistics.median(row["time/step_s"] for row in reference)

    soak_log = os.path.join(work, "soak.log")
    code, kills, wall = run(args.tandem, config, args.set, os.path.join(work, "soak"), soak_log, args.every, random.Random(args.seed))
    got = metric_rows(os.path.join(work, "soak"))
    diffs = differences(reference, got) if code == 0 else ["the run ended with exit {}".format(code)]
    for role in sorted({kill[0] for kill in kills}):
        times = [kill[2] for kill in kills if kill[0] == role and kill[2] is not None]
        print(json.dumps({
            "bench": "soak_kills", "role": role, "kills": sum(1 for kill in kills if kill[0] == role),
            "next_step_done_median_s": round(statistics.median(times), 3) if times else None,
            "next_step_done_max_s": round(max(times), 3) if times else None,
            "undisturbed_step_median_s": round(step_s, 3),
            "median_over_step": round(statistics.median(times) / step_s, 2) if times else None,
            "goal_s": 1.5,
        }))
    print(json.dumps({
        "bench": "soak_kills", "steps": args.steps, "every_s": args.every, "settings": args.set, "kills": len(kills),
        "restarts": got[-1].get("perf/worker_restarts") if got else None,
        "identical_metrics": not diffs, "wall_s": round(wall, 1), "undisturbed_wall_s": round(reference_wall, 1),
        "first_differences": diffs[:5], "work_dir": work,
    }))
    if args.snapshot_cost:
        steps = {"memory": [], "off": []}
        for i in range(args.snapshot_cost):
            for mode in ("memory", "off"):
                run_dir = os.path.join(work, "cost-{}-{}".format(mode, i))
                settings = args.set + ["learner.snapshot=" + mode]
                run(args.tandem, config, settings, run_dir, run_dir + ".log")
                # The first steps pay for process start-up: left out.
                steps[mode] += [row["time/step_s"] for row in metric_rows(run_dir)[5:]]
        memory, off = statistics.median(steps["memory"]), statistics.median(steps["off"])
        print(json.dumps({
            "bench": "soak_kills", "snapshot_cost_runs": args.snapshot_cost,
            "step_median_s_snapshots": round(memory, 4), "step_median_s_no_snapshots": round(off, 4),
            "ratio": round(memory / off, 3),
        }))
    if args.check and diffs:
        with open(soak_log) as f:
            sys.stderr.write(f.read()[-6000:])
        sys.exit(1)


if __name__ == "__main__":
    main()
