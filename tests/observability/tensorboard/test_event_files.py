#!/usr/bin/python3
"""tandem's TensorBoard writer, read back by an independent reader (read_events.py: Debian's
python3-protobuf and python3-crc32c, TensorBoard's own field numbers).

1. Rows of fresh random scalars (NaN, infinities, float's edges, a step past 32 bits):
   every (step, tag, value, wall_time) read back exactly, values as float32. Steps written
   again (a re-run) are preceded by a SessionLog START, so TensorBoard shows them once.
2. The reader refuses damaged files (a flipped byte anywhere, a cut-off end, a first record
   that is not the file version, an empty file), so the check above can fail.
3. A full disk (the file capped by RLIMIT_FSIZE): the write throws an error naming the file,
   the records before it stay whole, and the writer continues the file once space is back.

Usage: test_event_files.py WRITE_SAMPLE_EVENTS
"""
import json
import pathlib
import random
import struct
import subprocess
import sys
import tempfile

from event_values import as_float32, describe, read_events, shown_by_tensorboard


def run_writer(write_sample_events, *args):
    done = subprocess.run([write_sample_events, *map(str, args)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"write_sample_events {args}: exit {done.returncode}: {done.stderr}"
    print(done.stderr.strip())  # the seed, to reproduce a failure
    return [json.loads(line) for line in done.stdout.splitlines()]


def only_event_file(directory):
    files = sorted(directory.iterdir())
    assert len(files) == 1 and files[0].name.startswith("events.out.tfevents."), files
    return files[0]


def session_starts(read):
    return [r["step"] for r in read if r.get("session_log") == "START"]


def expected_starts(written):
    """A START before the first step and before each step not past the one before it."""
    steps = [w["step"] for i, w in enumerate(written) if i == 0 or w["step"] != written[i - 1]["step"]]
    return [s for i, s in enumerate(steps) if i == 0 or s <= steps[i - 1]]


def compare(written, read):
    read = [r for r in read if "tag" in r]
    assert len(read) == len(written), f"{len(read)} scalars read, {len(written)} written"
    for w, r in zip(written, read):
        assert (w["step"], w["tag"], w["wall_time"]) == (r["step"], r["tag"], r["wall_time"]), (w, r)
        expected, got = as_float32(w["value"]), as_float32(r["value"])
        assert expected == got, f"step {w['step']} {w['tag']}: wrote {w['value']}, expected " \
                                f"{describe(expected)}, read {describe(got)}"


def check_round_trip(write_sample_events, tmp):
    written = run_writer(write_sample_events, tmp / "sample")
    path = only_event_file(tmp / "sample")
    code, read, err = read_events(path)
    assert code == 0, err
    compare(written, read)
    kinds = {"nan": 0, "inf": 0, "-inf": 0}
    for w in written:
        if isinstance(w["value"], str):
            kinds[w["value"]] += 1
    assert all(kinds.values()), f"the random rows lack a NaN or an infinity: {kinds}"
    edges = {r["tag"]: r["value"] for r in read if r.get("tag", "").startswith("edge/")}
    assert edges["edge/overflows"] == "inf" and edges["edge/huge_negative"] == "-inf", edges
    assert edges["edge/rounds_to_float_max"] == struct.unpack("<f", b"\xff\xff\x7f\x7f")[0], edges
    assert edges["edge/underflows"] == 0.0 and 0 < edges["edge/subnormal"] < 1.2e-38, edges
    steps = sorted({r["step"] for r in read if "tag" in r})
    assert steps == list(range(1, 26)) + [1 << 40], steps
    starts = session_starts(read)
    assert starts == expected_starts(written) == [1, 24], (starts, expected_starts(written))
    # TensorBoard keeps steps 1..23 of the first pass and the re-run's 24 and 25.
    rerun_at = max(i for i, w in enumerate(written) if w["step"] == 1 << 40) + 1
    expected_shown = [w for w in written[:rerun_at] if w["step"] < 24] + written[rerun_at:]
    compare(expected_shown, shown_by_tensorboard(read))
    print(f"round trip: {len(written)} scalars of {len(steps)} steps read back exactly ({kinds}); "
          f"SessionLog START at steps {starts}, so the re-run of 24 and 25 hides the first")
    return path


def refused(blob, tmp, name, expect):
    path = tmp / name
    path.write_bytes(bytes(blob))
    code, _, err = read_events(path)
    assert code == 1 and expect in err, f"{name}: the reader answered {code}: {err!r} (wanted {expect!r})"


def first_record_length(blob):
    return 16 + struct.unpack("<Q", blob[:8])[0]


def check_refusals(good, tmp):
    blob = good.read_bytes()
    rng = random.Random()
    positions = sorted(set(rng.sample(range(len(blob)), 40)) | {0, 8, 12, len(blob) - 1})
    for at in positions:
        flipped = bytearray(blob)
        flipped[at] ^= 1 << rng.randrange(8)
        refused(flipped, tmp, f"flipped_{at}", "checksum mismatch")
    refused(blob[:-3], tmp, "cut_data", "truncated data")
    refused(blob + blob[:5], tmp, "cut_header", "truncated length header")
    refused(blob[first_record_length(blob):], tmp, "no_version", "first record is not file_version")
    refused(b"", tmp, "empty", "no records")
    print(f"refusals: {len(positions)} single flipped bits, cut-off data and header, a missing "
          "version record and an empty file are all refused")


def check_full_disk(write_sample_events, tmp):
    limit = 3000
    lines = run_writer(write_sample_events, "--file-size-limit", limit, tmp / "full")
    errors = [i for i, line in enumerate(lines) if "error" in line]
    assert len(errors) == 1, lines
    path = only_event_file(tmp / "full")
    message = lines[errors[0]]["error"]
    assert str(path) in message and "File too large" in message, message
    written = lines[:errors[0]] + lines[errors[0] + 1:]
    steps_before = {w["step"] for w in lines[:errors[0]]}
    assert steps_before, "no row fit under the cap: raise it"
    code, read, err = read_events(path)
    assert code == 0, err
    compare(written, read)
    assert session_starts(read) == [1], f"the failed step counted as written: {session_starts(read)}"
    print(f"full disk: '{message}'; the {len(steps_before)} steps before it and the one written after "
          "space came back are read whole")


def main():
    write_sample_events = sys.argv[1]
    try:
        import crc32c  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError as e:
        print(f"SKIP: the reader needs Debian's python3-protobuf and python3-crc32c: {e}")
        return 77
    with tempfile.TemporaryDirectory(prefix="tandem-tb-") as tmp:
        tmp = pathlib.Path(tmp)
        good = check_round_trip(write_sample_events, tmp)
        check_refusals(good, tmp)
        check_full_disk(write_sample_events, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
