"""Shared by the TensorBoard tests: run the independent reader, and compare values as the
float32 TensorBoard stores (a double rounded to nearest; past float's range, infinity)."""
import json
import math
import pathlib
import struct
import subprocess

READER = pathlib.Path(__file__).resolve().parent / "read_events.py"


def read_events(*paths):
    """(exit code, scalars as dicts, stderr) of read_events.py over the given paths."""
    done = subprocess.run(["/usr/bin/python3", str(READER), *map(str, paths)], capture_output=True, text=True,
                          timeout=120)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def shown_by_tensorboard(rows):
    """The scalars TensorBoard's loader keeps of rows read in order (every file of a run, in
    name order): each SessionLog START but the run's first drops the scalars read so far at
    its step and later (EventAccumulator's purge of orphaned data, for file_version 2)."""
    kept, seen_start = [], False
    for row in rows:
        if row.get("session_log") == "START":
            if seen_start:
                kept = [k for k in kept if k["step"] < row["step"]]
            seen_start = True
        elif "tag" in row:
            kept.append(row)
    return kept


def as_float32(value):
    """A canonical float32 of a double (or "nan", "inf", "-inf"): NaN as "nan", else its bytes."""
    if value is None or value == "nan" or (isinstance(value, float) and math.isnan(value)):
        return "nan"
    if value in ("inf", "-inf"):
        value = float(value)
    try:
        return struct.pack("<f", value)  # Python rounds to nearest, ties to even, as C does
    except OverflowError:  # rounds past FLT_MAX
        return struct.pack("<f", math.copysign(math.inf, value))


def describe(value):
    return value if isinstance(value, str) else struct.unpack("<f", value)[0]
