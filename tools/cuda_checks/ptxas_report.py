"""Compile one .cu file's device code with nvcc and read ptxas's per-kernel resource report.

Used by ptxas_gate.py. Only device code for one architecture is compiled (-cubin): that
skips the host compile (norm_act.cu: 1.7 s instead of 2.8 s with -c) and gives ptxas the
same input it gets in the real build.
"""

import dataclasses
import re
import subprocess
import tempfile

# The budgets in kernels/resource_budgets.json are sm_90 figures: another architecture
# allocates registers differently, so the gate always compiles for sm_90.
GENCODE = "-gencode=arch=compute_90,code=sm_90"

_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"ptxas info\s*: Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CUMULATIVE_STACK = re.compile(r"(\d+) bytes cumulative stack size")
_WARNING = re.compile(r"ptxas warning\s*: (.*)")
_QUOTED_NAME = re.compile(r"'([^']+)'")


@dataclasses.dataclass
class KernelUsage:
    mangled: str
    name: str = ""            # demangled, without the parameter list
    base_name: str = ""       # unqualified, without template arguments: the budget key
    template_args: list = dataclasses.field(default_factory=list)
    registers: int = 0
    barriers: int = 0
    static_smem_bytes: int = 0
    stack_bytes: int = 0      # own frame, or the cumulative stack with callees if larger
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    complete: bool = False    # set by the "Used N registers" line; False means a parse failure


@dataclasses.dataclass
class FileReport:
    kernels: list              # [KernelUsage], in ptxas order
    warnings: list             # [(mangled name or None, message)]
    error: str = ""            # nvcc's output when it failed; empty on success


def compile_and_report(nvcc, source, root, extra_flags=()):
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cmd = [nvcc, "-std=c++17", f"-I{root}", "-DTANDEM_WITH_CUDA=1", GENCODE,
               "--resource-usage", "-Xptxas", "-warn-spills,-warn-lmem-usage",
               *extra_flags, "-cubin", "-o", cubin.name, str(source)]
        run = subprocess.run(cmd, capture_output=True, text=True)
    output = run.stdout + run.stderr
    if run.returncode != 0:
        return FileReport([], [], error=f"$ {' '.join(cmd)}\n{output}")
    report = parse_ptxas_output(output)
    demangle(report.kernels)
    return report


def parse_ptxas_output(text):
    kernels, warnings, current, properties_of = [], [], None, None
    for line in text.splitlines():
        if m := _WARNING.search(line):
            named = _QUOTED_NAME.search(m.group(1))
            warnings.append((named.group(1) if named else None, m.group(1).strip()))
        elif m := _ENTRY.search(line):
            current = KernelUsage(mangled=m.group(1))
            kernels.append(current)
        elif current is None:
            continue  # file-level lines ("0 bytes gmem") and non-entry functions
        elif m := _PROPERTIES.search(line):
            properties_of = m.group(1)
        elif (m := _FRAME.search(line)) and properties_of == current.mangled:
            # A callee's frame is not the kernel's own; it shows in the cumulative stack.
            current.stack_bytes = int(m.group(1))
            current.spill_store_bytes, current.spill_load_bytes = int(m.group(2)), int(m.group(3))
        elif m := _USED.search(line):
            current.registers = int(m.group(1))
            current.barriers = _int_or_zero(_BARRIERS, line)
            current.static_smem_bytes = _int_or_zero(_SMEM, line)
            current.stack_bytes = max(current.stack_bytes, _int_or_zero(_CUMULATIVE_STACK, line))
            current.complete = True
            current = None  # the "Used" line closes an entry's report
    return FileReport(kernels, warnings)


def _int_or_zero(pattern, line):
    m = pattern.search(line)
    return int(m.group(1)) if m else 0


def demangle(kernels):
    """Fills name, base_name and template_args; c++filt -p drops the parameter list."""
    if not kernels:
        return
    run = subprocess.run(["c++filt", "-p"], input="\n".join(k.mangled for k in kernels),
                         capture_output=True, text=True, check=True)
    for kernel, name in zip(kernels, run.stdout.splitlines()):
        kernel.name = name.strip()
        qualified, kernel.template_args = split_template_args(kernel.name)
        kernel.base_name = qualified.rsplit("::", 1)[-1]


def split_template_args(name):
    """'ns::k<float, 8>' -> ('ns::k', ['float', '8']); a name without arguments is unchanged."""
    if not name.endswith(">"):
        return name, []
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {">": 1, "<": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i], _split_top_level(name[i + 1:-1])
    return name, []


def _split_top_level(args):
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(args):
        depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(args[start:i].strip())
            start = i + 1
    parts.append(args[start:].strip())
    return parts
