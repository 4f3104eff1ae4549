// Symbols of a stack dump's frames (core/stack_dump_symbols.h): function, file and line
// from GCC's libbacktrace where the build found it (TANDEM_HAVE_LIBBACKTRACE, the
// executable's line tables read on first use), else function names from dladdr, demangled.
// The capture of the addresses, in signal handlers, is core/stack_dump.cpp.
#include "core/stack_dump_symbols.h"

#include <cxxabi.h>
#include <dlfcn.h>
#if TANDEM_HAVE_LIBBACKTRACE
#include <backtrace.h>
#endif
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace tandem {
namespace {

std::string demangle(const char* name) {
  int status = 0;
  char* plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && plain ? plain : name;
  std::free(plain);
  return out;
}

struct Location {
  std::string function;
  std::string file;
  int line = 0;
};

#if TANDEM_HAVE_LIBBACKTRACE
// Reads the executable's line tables on first use (from the dumper thread, not at startup).
backtrace_state* symbol_state() {
  static backtrace_state* s = backtrace_create_state(nullptr, /*threaded=*/1, [](void*, const char*, int) {}, nullptr);
  return s;
}
#endif

// Function, file and line of `pc`, innermost inlined function first; one entry with
// what is known (maybe only the function) when there is no line table.
std::vector<Location> locate(uintptr_t pc) {
  std::vector<Location> found;
#if TANDEM_HAVE_LIBBACKTRACE
  if (backtrace_state* s = symbol_state()) {
    backtrace_pcinfo(
        s, pc,
        [](void* data, uintptr_t, const char* file, int line, const char* function) -> int {
          auto& out = *static_cast<std::vector<Location>*>(data);
          if (function || file) out.push_back({function ? demangle(function) : "", file ? file : "", line});
          return 0;
        },
        [](void*, const char*, int) {}, &found);
    if (found.empty() || found[0].function.empty()) {
      std::string symbol;
      backtrace_syminfo(
          s, pc,
          [](void* data, uintptr_t, const char* name, uintptr_t, uintptr_t) {
            if (name) *static_cast<std::string*>(data) = demangle(name);
          },
          [](void*, const char*, int) {}, &symbol);
      if (!symbol.empty()) {
        if (found.empty()) found.push_back({});
        found[0].function = symbol;
      }
    }
  }
#endif
  if (found.empty() || found[0].function.empty()) {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(pc), &info) && info.dli_sname) {
      if (found.empty()) found.push_back({});
      found[0].function = demangle(info.dli_sname);
    }
  }
  return found;
}

std::string module_of(void* pc) {
  Dl_info info{};
  if (!::dladdr(pc, &info) || !info.dli_fname) return "?";
  const char* slash = std::strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

}  // namespace

void stack_dump_append_frames(const std::vector<void*>& frames, std::string& out) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto pc = reinterpret_cast<uintptr_t>(frames[i]);
    // Below the first frame each address is a return address: look up the call before it.
    const std::vector<Location> where = locate(i == 0 ? pc : pc - 1);
    if (where.empty()) {
      out += fmt::format("  #{:<2} 0x{:016x} ?? in {}\n", i, pc, module_of(frames[i]));
      continue;
    }
    for (size_t k = 0; k < where.size(); ++k) {
      const Location& l = where[k];
      std::string place = l.file.empty() ? "in " + module_of(frames[i]) : fmt::format("at {}:{}", l.file, l.line);
      out += fmt::format("  #{:<2} 0x{:016x} {}{} {}\n", i, pc, k ? "(inlined into) " : "",
                         l.function.empty() ? "??" : l.function, place);
    }
  }
}

}  // namespace tandem
