#include "controller/openmp_waits.h"

#include <cstdlib>

#include <unistd.h>

namespace tandem {

void reexec_with_passive_openmp_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (::setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // Not re-executed (no /proc): the worker runs with libgomp's default policy.
}

}  // namespace tandem
