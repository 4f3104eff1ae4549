#!/usr/bin/python3
"""TensorBoard event files (logging.tensorboard), read back by an independent reader
(read_events.py: Debian's python3-protobuf and python3-crc32c, TensorBoard's field numbers).

1. tandem's writer with fresh random scalars (NaN, infinities): every value read back exactly.
2. One flipped byte, or a cut-off file: the reader refuses it (so the checks above can fail).
3. A real run: every (step, key) of metrics.jsonl is in the event files with its value.

Usage: test_tensorboard.py TANDEM WRITE_SAMPLE_EVENTS
"""
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parents[2]
READER = HERE / "read_events.py"


def f32(value):
    return struct.pack("<f", value)


def read_events(*paths):
    done = subprocess.run(["/usr/bin/python3", str(READER), *map(str, paths)], capture_output=True, text=True,
                          timeout=120)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def same(expected, got):
    if expected is None or isinstance(expected, str):
        return expected == got
    return got is not None and not isinstance(got, str) and f32(expected) == f32(got)


def check_writer(write_sample_events, tmp):
    out = tmp / "sample"
    done = subprocess.run([write_sample_events, str(out)], capture_output=True, text=True, timeout=60, check=True)
    expected = [json.loads(line) for line in done.stdout.splitlines()]
    files = sorted(out.iterdir())
    assert len(files) == 1 and files[0].name.startswith("events.out.tfevents."), files
    code, got, err = read_events(files[0])
    assert code == 0, err
    assert len(got) == len(expected) == 25 * 40, (len(got), len(expected))
    specials = 0
    for e, g in zip(expected, got):
        assert (e["step"], e["tag"]) == (g["step"], g["tag"]), (e, g)
        assert same(e["value"], g["value"]), (e, g)
        specials += e["value"] is None or isinstance(e["value"], str)
    assert specials > 0, "no NaN or infinity among the random values"
    print(f"writer: {len(got)} random scalars read back exactly ({specials} NaN or infinite)")
    return files[0]


def check_refusals(good, tmp):
    blob = bytearray(good.read_bytes())
    flipped = tmp / "flipped"
    blob_flipped = bytearray(blob)
    blob_flipped[len(blob) // 2] ^= 0x01
    flipped.write_bytes(blob_flipped)
    code, _, err = read_events(flipped)
    assert code == 1 and "checksum mismatch" in err, (code, err)
    cut = tmp / "cut"
    cut.write_bytes(bytes(blob[:-3]))
    code, _, err = read_events(cut)
    assert code == 1 and "truncated" in err, (code, err)
    print("reader: refuses a flipped byte and a cut-off file")


def check_run(tandem, tmp):
    run = tmp / "run"
    done = subprocess.run([tandem, "run", str(SOURCE / "configs/quickstart.yaml"), "--run-dir", str(run), "--set",
                           "experiment.steps=4", "--set", "sft.steps=0", "--set", "logging.tensorboard=true", "--set",
                           "logging.console=quiet"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    files = sorted((run / "tensorboard").iterdir())
    assert files, "no event file in RUN_DIR/tensorboard"
    code, got, err = read_events(*files)
    assert code == 0, err
    by_key = {(g["step"], g["tag"]): g["value"] for g in got}
    compared = 0
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        step = row.pop("step")
        for key, value in row.items():
            assert (step, key) in by_key, f"step {step} {key} is not in the event files"
            assert same(value, by_key[(step, key)]), (step, key, value, by_key[(step, key)])
            compared += 1
    assert compared == len(got), (compared, len(got))
    assert compared > 4 * 20
    print(f"run: all {compared} (step, key) values of metrics.jsonl are in {files[0].name}")


def main():
    tandem, write_sample_events = sys.argv[1], sys.argv[2]
    try:
        import crc32c  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError as e:
        print(f"SKIP: the reader needs Debian's python3-protobuf and python3-crc32c: {e}")
        return 77
    with tempfile.TemporaryDirectory(prefix="tandem-tb-") as tmp:
        tmp = pathlib.Path(tmp)
        good = check_writer(write_sample_events, tmp)
        check_refusals(good, tmp)
        check_run(tandem, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
