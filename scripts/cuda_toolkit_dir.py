#!/usr/bin/env python3
"""Print the CUDA toolkit directory that an nvcc command belongs to.

nvcc on PATH may be a symlink or a wrapper script (e.g. /usr/bin/nvcc), so the toolkit is
not always the parent of nvcc's directory. nvcc itself knows: `nvcc --dryrun` prints
`#$ TOP=<toolkit>/bin/..`. The directory printed has include/cuda_runtime.h, or this fails
naming what it found.
"""
import os
import subprocess
import sys


def toolkit_dir(nvcc: list[str]) -> str:
    result = subprocess.run(nvcc + ["--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                            capture_output=True, text=True, check=False)
    for line in (result.stderr + result.stdout).splitlines():
        if line.startswith("#$ TOP="):
            return os.path.realpath(line[len("#$ TOP="):].strip())
    raise SystemExit(f"cuda_toolkit_dir.py: `{' '.join(nvcc)} --dryrun` printed no TOP= line "
                     f"(exit {result.returncode}); cannot locate the CUDA toolkit")


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: cuda_toolkit_dir.py NVCC [ARGS...]")
    top = toolkit_dir(sys.argv[1:])
    header = os.path.join(top, "include", "cuda_runtime.h")
    if not os.path.isfile(header):
        raise SystemExit(f"cuda_toolkit_dir.py: nvcc's toolkit {top} has no {header}")
    print(top)


if __name__ == "__main__":
    main()
