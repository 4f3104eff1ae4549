#!/usr/bin/env python3
"""A portable build (meson -Dcpu_arch=portable) runs on CPUs older than the one that built it.

1. Each instruction-set build of gemm_nt's tiles (rollout/cpu_gemm_variants.h) defines one
   symbol, its getter: nothing inline that the linker could keep as every caller's copy
   (an AVX-512 copy of a shared function would then run on CPUs without AVX-512).
2. Under QEMU's user-mode emulation of older CPUs, the gemm test binary runs and picks the
   build of the tiles that CPU supports: Westmere (x86-64-v2: SSE4.2, no AVX) the generic
   one, Haswell (x86-64-v3) the AVX2 one. Only a portable build is expected to pass this:
   with -march=native the rest of the CPU code uses the building machine's instructions.
3. On the same emulated CPUs, the sampler's row passes (rollout/sampler_rows.h, copies
   picked at load time by GCC's target_clones) give the same bits as the plain build.

usage: check_portable.py CPU_ARCH NM GEMM_TEST SAMPLER_TEST VARIANT_LIB...
Exit 77 (skipped) with the reason where a part cannot run here.
"""
import os
import re
import shutil
import subprocess
import sys

SKIP = 77


def check_symbols(nm, libraries):
    bad = []
    for library in libraries:
        variant = re.search(r"tandem_cpu_gemm_(\w+)\.a$", library).group(1)
        out = subprocess.run([nm, "-C", "--defined-only", library], capture_output=True, text=True, check=True).stdout
        # Global (T, D, B, R), weak (W, V) and unique (u) symbols are shared with the rest of the program.
        shared = [line for line in out.splitlines() if re.match(r"^[0-9a-f]+ [TDBRWVu] ", line)]
        want = f"tandem::cpu::gemm_variant_{variant}()"
        if len(shared) != 1 or not shared[0].endswith(want):
            bad.append(f"{library}: defines {[line.split(' ', 2)[2] for line in shared]}, want only {want}")
    for line in bad:
        print("check_portable:", line, file=sys.stderr)
    return not bad


def run_on(cpu, binary, want_isa):
    done = subprocess.run(["qemu-x86_64", "-cpu", cpu, binary, "-s", "--no-colors"], capture_output=True, text=True,
                          timeout=600)
    picked = re.search(r"gemm_nt: ([\w+]+),", done.stdout)
    if done.returncode != 0 or not picked or picked.group(1) != want_isa:
        print(f"check_portable: on an emulated {cpu}: exit {done.returncode}, picked "
              f"{picked.group(1) if picked else 'nothing'} (want {want_isa})\n{done.stdout[-3000:]}{done.stderr[-2000:]}",
              file=sys.stderr)
        return False
    print(f"check_portable: {os.path.basename(binary)} passes on an emulated {cpu} with the {want_isa} tiles")
    return True


def sampler_rows_on(cpu, binary):
    done = subprocess.run(["qemu-x86_64", "-cpu", cpu, binary, "-tc=shifted_exps gives the same bits*", "--no-colors"],
                          capture_output=True, text=True, timeout=600)
    passed = re.search(r"test cases:\s+1 \|\s+1 passed", done.stdout)
    if done.returncode != 0 or not passed:
        print(f"check_portable: the sampler's row passes on an emulated {cpu}: exit {done.returncode}\n"
              f"{done.stdout[-3000:]}{done.stderr[-2000:]}", file=sys.stderr)
        return False
    print(f"check_portable: the sampler's row passes give the plain build's bits on an emulated {cpu}")
    return True


def main():
    cpu_arch, nm, binary, sampler_binary, libraries = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    if not check_symbols(nm, libraries):
        return 1
    print(f"check_portable: {len(libraries)} instruction-set builds each define only their getter")
    if cpu_arch != "portable":
        print(f"check_portable: skipping the older CPUs: this build is -march={cpu_arch}; "
              "meson -Dcpu_arch=portable builds one that runs there")
        return SKIP
    if not shutil.which("qemu-x86_64"):
        print("check_portable: skipping the older CPUs: qemu-x86_64 is missing (Debian: qemu-user; scripts/install_deps.sh)")
        return SKIP
    ok = run_on("Westmere", binary, "generic") and run_on("Haswell", binary, "avx2+fma")
    ok = ok and sampler_rows_on("Westmere", sampler_binary) and sampler_rows_on("Haswell", sampler_binary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
