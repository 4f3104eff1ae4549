// `tandem plugin-flags`: the compiler flags a plugin library is built with, so that the
// one command that builds a reward is
//   g++ my_reward.cpp $(tandem plugin-flags) -o libmy_reward.so
// The flags are this build's: the same C++ standard, libstdc++ ABI and libtorch headers
// (a plugin built against another libtorch is refused at load, plugin_loader.h).
#include "controller/cli/cli.h"

#include <fmt/format.h>

namespace tandem {

int cli_plugin_flags() {
  std::string flags = "-std=c++17 -O2 -shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=1";
  flags += fmt::format(" -I{}", TANDEM_PLUGIN_INCLUDE_DIR);
  for (const std::string dir : {TANDEM_TORCH_INCLUDE_DIRS}) {
    // The compiler's own directories stay out: `-isystem /usr/include` reorders them and
    // breaks libstdc++'s #include_next <stdlib.h>.
    if (dir == "/usr/include" || dir == "/usr/local/include") continue;
    flags += fmt::format(" -isystem {}", dir);
  }
  fmt::print("{}\n", flags);
  return 0;
}

}  // namespace tandem
