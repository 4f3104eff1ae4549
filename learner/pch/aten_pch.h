// Precompiled header of the libtorch-heavy learner libraries. <ATen/ATen.h> is ~75% of
// each of their translation units' compile time (12 s of 17 s for kl.cpp on one core);
// compiled once per library, it is loaded in well under a second. Meson force-includes it
// in every source of the libraries that name it (cpp_pch); sources still include what
// they use, so they build without it too.
#include <ATen/ATen.h>
