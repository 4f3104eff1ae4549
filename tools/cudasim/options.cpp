#include "options.h"

#include "sanitizers.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cudasim {
namespace {

[[noreturn]] void bad(const char* name, const char* value, const char* allowed) {
  std::fprintf(stderr, "cudasim: %s=\"%s\": allowed %s\n", name, value, allowed);
  std::exit(2);
}

Options from_environment() {
  Options o;
#if CUDASIM_ASAN || CUDASIM_TSAN
  o.stack_bytes = 512 * 1024;  // instrumented frames are several times larger
#endif
  if (const char* v = std::getenv("CUDASIM_ORDER")) {
    if (std::strcmp(v, "forward") == 0) o.order = Order::forward;
    else if (std::strcmp(v, "reverse") == 0) o.order = Order::reverse;
    else if (std::strcmp(v, "shuffle") == 0) o.order = Order::shuffle;
    else bad("CUDASIM_ORDER", v, "forward, reverse, shuffle");
  }
  if (const char* v = std::getenv("CUDASIM_SEED")) {
    char* end = nullptr;
    o.seed = std::strtoull(v, &end, 0);
    if (*v == '\0' || *end != '\0') bad("CUDASIM_SEED", v, "an unsigned integer");
  }
  if (const char* v = std::getenv("CUDASIM_POISON")) {
    char* end = nullptr;
    const unsigned long byte = std::strtoul(v, &end, 0);
    if (*v == '\0' || *end != '\0' || byte > 255) bad("CUDASIM_POISON", v, "a byte, e.g. 0xFF or 0x7F");
    o.poison = static_cast<unsigned char>(byte);
  }
  if (const char* v = std::getenv("CUDASIM_STACK_KB")) {
    char* end = nullptr;
    const unsigned long kb = std::strtoul(v, &end, 0);
    if (*v == '\0' || *end != '\0' || kb < 16) bad("CUDASIM_STACK_KB", v, "an integer >= 16");
    o.stack_bytes = kb * 1024;
  }
  if (const char* v = std::getenv("CUDASIM_DIGEST")) o.digest_path = v;
  return o;
}

}  // namespace

const Options& options() {
  static const Options o = from_environment();
  return o;
}

}  // namespace cudasim
