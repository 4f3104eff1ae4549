// OpenMP threads that sleep while they wait, for worker processes.
//
// libgomp's threads spin on their core for a while at every barrier before sleeping. On
// a machine whose cores are also busy with our other processes (the rollout engine's pool,
// reward workers, a second rank), a spinning thread burns the timeslice that the thread
// it waits for needs: a learner step measured 5-6.5 s instead of 0.8 s that way
// (issue 15). libgomp reads OMP_WAIT_POLICY once, when it is loaded, so the policy has to
// be in the environment before the process starts: a worker re-executes itself with it.
#pragma once

namespace tandem {

// When OMP_WAIT_POLICY is unset, sets it to PASSIVE and re-executes this program with the
// same arguments (returning only if that fails). A user's own setting is left alone.
void reexec_with_passive_openmp_waits(char** argv);

}  // namespace tandem
