#!/usr/bin/env python3
"""Rewrites a CUDA source (.cu) into C++ for cudasim, or fails naming what it cannot handle.

    rewrite_cu.py INPUT.cu OUTPUT.cpp [--root DIR]

Three mechanical rewrites, on code only (comments and string literals are left alone):
  kernel<<<grid, block[, shared[, stream]]>>>(args)
      -> ::cudasim::launch("kernel", CUDASIM_SITE, kernel, grid, block, shared, stream, args)
  extern __shared__ T name[];
      -> T* name = ::cudasim::dynamic_shared<T>(CUDASIM_SITE);
  __shared__ T name[d1][d2];   /   __shared__ T name;
      -> auto& name = ::cudasim::shared_object<T[(d1)][(d2)]>(CUDASIM_SITE);

The guard: after rewriting, every `__identifier` left in the code must be one cudasim
provides (KNOWN below); `<<<`, `asm` and the CUDA storage classes cudasim does not model
must be gone. The project headers the file includes with "..." and that end in .cuh are
not rewritten, so they must need no rewrite and pass the same guard. A failure names the
file, the line and the construct, and the build stops: an unhandled construct never turns
silently into wrong C++.
"""
import argparse
import os
import re
import sys

# What cudasim.h, CUDA's host headers or the C++ compiler define for the rewritten code.
KNOWN = {
    # declaration specifiers cudasim.h defines away
    "__global__", "__device__", "__host__", "__forceinline__", "__launch_bounds__", "__restrict__",
    # barriers, warp collectives, fences
    "__syncthreads", "__syncthreads_or", "__syncthreads_and", "__syncthreads_count", "__syncwarp",
    "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
    "__ballot_sync", "__any_sync", "__all_sync", "__threadfence", "__threadfence_block",
    # bit and math intrinsics
    "__float_as_uint", "__uint_as_float", "__float_as_int", "__int_as_float", "__ffs", "__ffsll",
    "__clz", "__clzll", "__popc", "__popcll", "__float2ull_rn", "__expf", "__logf", "__fdividef", "__ldg",
    # bf16 (cuda_bf16.h's host path)
    "__nv_bfloat16", "__nv_bfloat162", "__float2bfloat16_rn", "__float2bfloat16", "__bfloat162float",
    # the compiler's
    "__FILE__", "__LINE__", "__func__", "__builtin_expect", "__VA_ARGS__", "__attribute__",
}
FORBIDDEN = [
    (re.compile(r"<<<"), "a kernel launch the rewriter did not recognise"),
    (re.compile(r"\basm\b|\b__asm__\b"), "inline PTX (asm)"),
    (re.compile(r"\bcooperative_groups\b"), "cooperative groups"),
]


def code_mask(text):
    """The text with comments and string/char literals blanked (same length, newlines kept)."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


class RewriteError(Exception):
    pass


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def split_top_level(s):
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[start:i].strip())
            start = i + 1
    parts.append(s[start:].strip())
    return parts


def kernel_expression_start(mask, end):
    """Start of `name`, `ns::name` or `name<args>` ending right before `end`."""
    i = end
    while i > 0 and mask[i - 1].isspace():
        i -= 1
    if i > 0 and mask[i - 1] == ">":  # template arguments: match the angle brackets backwards
        depth = 0
        while i > 0:
            i -= 1
            if mask[i] == ">":
                depth += 1
            elif mask[i] == "<":
                depth -= 1
                if depth == 0:
                    break
    while i > 0 and (mask[i - 1].isalnum() or mask[i - 1] in "_:"):
        i -= 1
    return i


def rewrite_launches(text, path):
    mask = code_mask(text)
    edits = []
    for m in re.finditer(r"<<<", mask):
        start = kernel_expression_start(mask, m.start())
        kernel = text[start:m.start()].strip()
        close = mask.find(">>>", m.end())
        paren = close + 3
        while paren < len(mask) and mask[paren].isspace():
            paren += 1
        if not kernel or close < 0 or paren >= len(mask) or mask[paren] != "(":
            raise RewriteError(f"{path}:{line_of(text, m.start())}: a kernel launch the rewriter cannot parse")
        config = split_top_level(text[m.end():close])
        if not 2 <= len(config) <= 4:
            raise RewriteError(f"{path}:{line_of(text, m.start())}: a launch needs 2 to 4 configuration values")
        config += ["0"] * (4 - len(config))
        name = " ".join(kernel.split()).replace('"', '\\"')
        after = mask[paren + 1:].lstrip()
        comma = "" if after.startswith(")") else ", "
        replacement = f'::cudasim::launch("{name}", CUDASIM_SITE, {kernel}, {", ".join(config)}{comma}'
        # Keep the line count: the launch's own newlines stay where they were.
        replacement += "\n" * text.count("\n", start, paren + 1)
        edits.append((start, paren + 1, replacement))
    for start, end, replacement in reversed(edits):
        text = text[:start] + replacement + text[end:]
    return text


TYPE = r"(?:const\s+)?[A-Za-z_][\w:]*(?:\s*<[^;{}()]*?>)?"
DYNAMIC = re.compile(r"extern\s+__shared__\s+(?P<type>" + TYPE + r")\s+(?P<name>\w+)\s*\[\s*\]\s*;")
STATIC = re.compile(r"__shared__\s+(?P<type>" + TYPE + r")\s+(?P<name>\w+)\s*(?P<dims>(?:\[[^\];]+\]\s*)*);")


def rewrite_shared(text):
    def sub(pattern, make):
        nonlocal text
        mask = code_mask(text)
        for m in reversed(list(pattern.finditer(mask))):
            text = text[:m.start()] + make(m, text[m.start():m.end()]) + text[m.end():]

    sub(DYNAMIC, lambda m, src: f"{m['type']}* {m['name']} = ::cudasim::dynamic_shared<{m['type']}>(CUDASIM_SITE);")

    def static(m, src):
        dims = "".join(f"[({d})]" for d in re.findall(r"\[([^\]]+)\]", m["dims"]))
        return f"auto& {m['name']} = ::cudasim::shared_object<{m['type']}{dims}>(CUDASIM_SITE);"

    sub(STATIC, static)
    return text


def guard(text, path):
    """Every construct cudasim does not handle, as 'path:line: what' lines."""
    mask = code_mask(text)
    problems = []
    for pattern, what in FORBIDDEN:
        for m in pattern.finditer(mask):
            problems.append(f"{path}:{line_of(text, m.start())}: {what} ({m.group(0)})")
    for m in re.finditer(r"(?<![\w])__\w+", mask):
        word = m.group(0)
        if word in KNOWN or word.startswith("__cudasim") or word.startswith("__builtin_"):
            continue
        if word == "__shared__":
            what = "a __shared__ declaration the rewriter does not handle (one declarator per line: T name[dims];)"
        else:
            what = f"{word}, which cudasim does not provide (add it to tools/cudasim/cudasim.h and KNOWN)"
        problems.append(f"{path}:{line_of(text, m.start())}: {what}")
    return problems


def project_headers(text, root):
    for m in re.finditer(r'^\s*#\s*include\s+"([^"]+\.cuh)"', code_mask_keep_strings(text), re.M):
        yield os.path.join(root, m.group(1))


def code_mask_keep_strings(text):
    """Comments blanked, strings kept (to read #include "..." lines)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--root", default=".", help="the directory project includes are relative to")
    args = parser.parse_args()
    with open(args.input) as f:
        source = f.read()
    try:
        rewritten = rewrite_shared(rewrite_launches(source, args.input))
    except RewriteError as e:
        sys.exit(f"cudasim rewrite: {e}")
    problems = guard(rewritten, args.input)
    for header in project_headers(source, args.root):
        with open(header) as f:
            problems += guard(f.read(), header)
    if problems:
        sys.exit("cudasim rewrite: constructs left unhandled:\n  " + "\n  ".join(problems))
    # cudasim.h first, then line numbers and __FILE__ of the original for errors and reports.
    path = os.path.abspath(args.input)
    with open(args.output, "w") as f:
        f.write('#include "tools/cudasim/cudasim.h"\n')
        f.write(f'#line 1 "{path}"\n')
        f.write(rewritten)


if __name__ == "__main__":
    main()
