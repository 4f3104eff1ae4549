#include "core/math_environment.h"

#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tandem {

namespace {

// The best OpenBLAS kernels this CPU's vector units run, or "" when nothing beats SSE.
std::string best_openblas_core() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

// OpenBLAS's choice when it is loaded in this process (libtorch's BLAS), else "".
std::string loaded_openblas_core() {
  using CoreName = char* (*)();
  auto core_name = reinterpret_cast<CoreName>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr) return "";
  const char* name = core_name();
  return name ? name : "";
}

bool uses_wide_vectors(const std::string& core) {
  for (const char* wide : {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"}) {
    if (::strcasecmp(core.c_str(), wide) == 0) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> missing_math_environment(bool computes_alone) {
  std::vector<std::string> missing;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    missing.push_back("OMP_WAIT_POLICY=PASSIVE");
    // Only with our passive policy: a wait policy the user chose is theirs.
    if (computes_alone && std::getenv("GOMP_SPINCOUNT") == nullptr) {
      missing.push_back("GOMP_SPINCOUNT=" + std::to_string(kOpenMpSpins));
    }
  }
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    const std::string loaded = loaded_openblas_core(), best = best_openblas_core();
    if (!loaded.empty() && !best.empty() && !uses_wide_vectors(loaded)) missing.push_back("OPENBLAS_CORETYPE=" + best);
  }
  return missing;
}

void reexec_with_math_environment(char** argv, bool computes_alone) {
  const std::vector<std::string> missing = missing_math_environment(computes_alone);
  if (missing.empty()) return;
  for (const std::string& setting : missing) {
    const size_t equals = setting.find('=');
    if (::setenv(setting.substr(0, equals).c_str(), setting.substr(equals + 1).c_str(), 1) != 0) return;
  }
  ::execv("/proc/self/exe", argv);
  // Not re-executed (no /proc): the process runs with the libraries' defaults.
}

}  // namespace tandem
