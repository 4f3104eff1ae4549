#!/usr/bin/env python3
"""Runs a cudasim test binary under several schedules and poison bytes.

    run_variants.py [--compare] BINARY --run ORDER,POISON [--run ...] [--arg=ARG ...]

Each run gets CUDASIM_ORDER=ORDER (forward | reverse | shuffle) and CUDASIM_POISON=POISON,
and every run the same TANDEM_TEST_SEED (a fresh one, printed, unless the environment has
one), so that the inputs are equal. With --compare, every device-to-host copy of every run
(CUDASIM_DIGEST) must be bit-identical to the first run's: a kernel whose result depends on
the order its threads or blocks run in, or on memory nothing wrote, fails here even when
its tolerance checks pass. Exit: 0 all passed, 77 the binary skipped, 1 otherwise.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("binary")
    parser.add_argument("--run", action="append", required=True, help="ORDER,POISON")
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--arg", action="append", default=[], dest="args", help="an argument for the binary")
    a = parser.parse_args()
    seed = os.environ.get("TANDEM_TEST_SEED") or str(random.getrandbits(63))
    print(f"run_variants: TANDEM_TEST_SEED={seed}", flush=True)
    digests = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, spec in enumerate(a.run):
            order, poison = spec.split(",")
            digest = os.path.join(tmp, f"digest{i}")
            env = dict(os.environ, TANDEM_TEST_SEED=seed, CUDASIM_ORDER=order, CUDASIM_POISON=poison,
                       CUDASIM_DIGEST=digest, CUDASIM_SEED=str(1 + i))
            print(f"run_variants: {os.path.basename(a.binary)} order={order} poison={poison}", flush=True)
            start = time.monotonic()
            status = subprocess.call([a.binary] + a.args, env=env)
            print(f"run_variants: exit {status} after {time.monotonic() - start:.1f} s", flush=True)
            if status == 77:
                return 77
            if status != 0:
                print(f"run_variants: FAILED with order={order} poison={poison} (TANDEM_TEST_SEED={seed})")
                return 1
            digests.append((spec, digest))
            if a.compare and i > 0 and not same_digests(digests[0], digests[-1]):
                return 1
    return 0


def same_digests(first, other):
    with open(first[1]) as f:
        want = f.read().splitlines()
    with open(other[1]) as f:
        got = f.read().splitlines()
    for n, (w, g) in enumerate(zip(want, got)):
        if w != g:
            print(f"run_variants: FAILED: device-to-host copy #{n} differs between runs {first[0]} and {other[0]}:\n"
                  f"  {w}\n  {g}\n(copy number, bytes, FNV-1a hash: a result depends on the thread order or on "
                  f"memory nothing wrote)")
            return False
    if len(want) != len(got):
        print(f"run_variants: FAILED: {len(want)} device-to-host copies with {first[0]}, {len(got)} with {other[0]}")
        return False
    if not want:
        print("run_variants: FAILED: no device-to-host copies were recorded (CUDASIM_DIGEST not honoured?)")
        return False
    print(f"run_variants: {len(want)} device-to-host copies identical between {first[0]} and {other[0]}")
    return True


if __name__ == "__main__":
    sys.exit(main())
