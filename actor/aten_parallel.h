// Include this instead of <ATen/Parallel.h> in a file that calls at::parallel_for.
//
// With libtorch's OpenMP backend, at::parallel_for is a header template: in a file compiled
// without OpenMP (_OPENMP undefined) it runs the whole range on the calling thread, and
// nothing says so. The learner's fused kernels ran that way until issue 32's eighth part
// (a quarter of a Qwen3-shaped bf16 step on one of two threads). The build gives such files
// `torch_parallel_dep` (meson.build); this stops a file that lacks it from compiling.
#pragma once

#include <ATen/Parallel.h>

// TANDEM_SERIAL_PARALLEL_FOR: set by the build where OpenMP is deliberately left out (a pip
// libtorch carrying its own OpenMP runtime, meson.build).
#if AT_PARALLEL_OPENMP && !defined(_OPENMP) && !defined(TANDEM_SERIAL_PARALLEL_FOR)
#error "at::parallel_for would run serially here: build this file with torch_parallel_dep (meson.build)"
#endif
