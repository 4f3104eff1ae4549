#!/usr/bin/python3
"""Real runs with logging.tensorboard: true, their event files read by the independent reader
(read_events.py). Every (step, key) of metrics.jsonl must be a scalar of that step with the
same value (as float32; metrics.jsonl's null is a NaN or an infinity), and nothing more.

1. A 4-step run (checkpoints at steps 2 and 4): one event file, steps 1..4.
2. A crash after step 4 but before its checkpoint (finished.json and checkpoints/step_4
   removed), then `tandem resume`: a second file re-runs steps 3 and 4 after a SessionLog
   START at step 3, so what TensorBoard shows (its loader's purge rule) equals metrics.jsonl.
3. `tandem resume --set experiment.steps=6` extends the run: a third file holds steps 5, 6.

Usage: test_run_events.py TANDEM
"""
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from event_values import as_float32, describe, read_events, shown_by_tensorboard

SOURCE = pathlib.Path(__file__).resolve().parents[3]


def tandem(*args):
    started = time.time()
    done = subprocess.run([*map(str, args), "--set", "logging.console=plain"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{' '.join(map(str, args))}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return started, time.time()


def event_files(run, count):
    directory = run / "tensorboard"
    assert directory.is_dir(), f"{directory} is missing: logging.tensorboard wrote nothing"
    files = sorted(directory.iterdir())  # name order: TensorBoard's loader reads them so
    assert len(files) == count and all(f.name.startswith("events.out.tfevents.") for f in files), \
        f"{count} event files expected (one per start of the run): {[f.name for f in files]}"
    return files


def read_file(path, started, ended):
    code, rows, err = read_events(path)
    assert code == 0, err
    for r in rows:
        assert started - 1 <= r["wall_time"] <= ended + 1, f"{path.name}: wall_time {r['wall_time']} is not " \
                                                            f"within its run ({started}..{ended})"
    return rows


def steps_and_starts(rows):
    steps = sorted({r["step"] for r in rows if "tag" in r})
    return steps, [r["step"] for r in rows if r.get("session_log") == "START"]


def compare_with_metrics(run, scalars):
    by_key = {}
    for r in scalars:
        assert (r["step"], r["tag"]) not in by_key, f"step {r['step']} {r['tag']} is shown twice"
        by_key[(r["step"], r["tag"])] = r["value"]
    compared = 0
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        step = row.pop("step")
        for key, value in row.items():
            assert (step, key) in by_key, f"step {step} {key} (metrics.jsonl) is not in the event files"
            got = as_float32(by_key[(step, key)])
            if value is None:  # metrics.jsonl writes NaN and infinities as null
                assert got == "nan" or describe(got) in (float("inf"), float("-inf")), (step, key, describe(got))
            else:
                assert as_float32(value) == got, f"step {step} {key}: metrics.jsonl {value}, event file {describe(got)}"
            compared += 1
    assert compared == len(by_key), f"the event files show {len(by_key) - compared} scalars metrics.jsonl has not"
    return compared


def main():
    binary = sys.argv[1]
    try:
        import crc32c  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError as e:
        print(f"SKIP: the reader needs Debian's python3-protobuf and python3-crc32c: {e}")
        return 77
    with tempfile.TemporaryDirectory(prefix="tandem-tb-run-") as tmp:
        run = pathlib.Path(tmp) / "run"
        # sft.steps=0: the warm-up's metrics go to sft_metrics.jsonl, not to TensorBoard.
        times = tandem(binary, "run", SOURCE / "configs/quickstart.yaml", "--run-dir", run, "--set",
                       "experiment.steps=4", "--set", "experiment.checkpoint_every=2", "--set", "sft.steps=0", "--set",
                       "logging.tensorboard=true")
        [first] = event_files(run, 1)
        rows = read_file(first, *times)
        assert steps_and_starts(rows) == ([1, 2, 3, 4], [1]), steps_and_starts(rows)
        compared = compare_with_metrics(run, [r for r in rows if "tag" in r])
        assert compared >= 4 * 20, f"only {compared} values: metrics.jsonl is thinner than expected"
        print(f"run: all {compared} (step, key) values of metrics.jsonl are in {first.name}")

        (run / "finished.json").unlink()  # as if the controller died before step 4's checkpoint
        shutil.rmtree(run / "checkpoints/step_4")
        times = tandem(binary, "resume", run)
        second = event_files(run, 2)[1]
        resumed = read_file(second, *times)
        assert steps_and_starts(resumed) == ([3, 4], [3]), steps_and_starts(resumed)
        rows += resumed
        compared = compare_with_metrics(run, shown_by_tensorboard(rows))
        print(f"crash and resume: {second.name} re-runs steps 3 and 4 after a START at 3; TensorBoard's purge "
              f"rule leaves exactly the {compared} values of metrics.jsonl")

        times = tandem(binary, "resume", run, "--set", "experiment.steps=6")
        third = event_files(run, 3)[2]
        new = read_file(third, *times)
        assert steps_and_starts(new) == ([5, 6], [5]), steps_and_starts(new)
        compared = compare_with_metrics(run, shown_by_tensorboard(rows + new))
        print(f"extend: {third.name} holds steps 5 and 6; all {compared} values of metrics.jsonl are shown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
