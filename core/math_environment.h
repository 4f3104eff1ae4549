// The environment our math libraries read once, when they are loaded, for the processes
// that compute (workers, benchmarks).
//
// - OMP_WAIT_POLICY=PASSIVE: libgomp's threads otherwise spin on their core for a while
//   at every barrier. On cores that are also busy with our other processes (the rollout
//   engine's pool, reward workers, a second rank) a spinning thread burns the timeslice
//   that the thread it waits for needs: a learner step took 5-6.5 s instead of 0.8 s that
//   way (issue 15).
// - GOMP_SPINCOUNT, for a process that computes alone (below): sleeping at once costs
//   every parallel region a wake-up, 63-104 us on this project's 2-core VMs against 2-8
//   us for a thread still spinning, and a small model's learner step runs hundreds of
//   regions: bench/learner_cpu's small bf16 step took 0.33-0.43 s passive against
//   0.26-0.30 s with 30,000 spins (alternating runs). With PASSIVE and an explicit count
//   libgomp spins that long, and not at all when its own threads outnumber the cores.
//   Alone only: two such processes sharing two cores took 3.4 times as long per step
//   with 20,000 spins.
// - OPENBLAS_CORETYPE: OpenBLAS 0.3.21 (Debian 12) does not know newer CPUs and falls back
//   to its SSE3 "Prescott" kernels on them (this project's Xeon VMs with AVX-512: a
//   learner step 2.0 s instead of 0.56 s). When the kernels it picked are older than the
//   CPU's vector units allow, the best kernels the CPU can run are named instead.
//
// All are read at library load, so they must be in the environment before the process
// starts: the process re-executes itself with them.
#pragma once

#include <string>
#include <vector>

namespace tandem {

// Sets the variables above that are missing (one the user set is never changed) and
// re-executes this program with the same arguments; returns, doing nothing more, when
// none is missing or the re-exec fails.
// `computes_alone`: see missing_math_environment.
void reexec_with_math_environment(char** argv, bool computes_alone = false);

// The variables (NAME=VALUE) this process should have had at start and does not. A
// launcher gives them to the workers it starts (the same program, the same libraries):
// those then start once, without the re-execution, which costs a whole start-up (~0.6 s).
// `computes_alone`: while this process computes, nothing else busy shares its cores (a
// learner of a synchronous run: the rollout workers wait while it trains; a benchmark).
// Its OpenMP threads then wait for the next parallel region by spinning briefly before
// they sleep (kOpenMpSpins), instead of sleeping at once.
std::vector<std::string> missing_math_environment(bool computes_alone = false);

// libgomp's spin count (GOMP_SPINCOUNT) for a process that computes alone: ~0.3 ms at
// libgomp's own estimate of 100,000 spins a millisecond.
constexpr long kOpenMpSpins = 30000;

}  // namespace tandem
