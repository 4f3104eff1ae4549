// `tandem`: one binary for every role. Adds every subcommand of the table
// (controller/cli/subcommands.cpp), parses the command line, and runs the one named.
#include "controller/cli/subcommands.h"
#include "core/error.h"
#include "core/heap_reuse.h"
#include "core/math_environment.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string_view>
#include <utility>
#include <vector>

int main(int argc, char** argv) {
  using namespace tandem;
  if (argc > 1 && std::string_view(argv[1]) == "worker") {
    reexec_with_math_environment(argv);
    keep_freed_memory_for_reuse();  // a worker repeats the same large allocations every step
  }
  CLI::App app{"tandem: reinforcement learning for language-model policies"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // --help shows each option's default

  std::vector<std::pair<CLI::App*, std::function<int()>>> commands;
  for (const Subcommand& s : subcommands()) {
    CLI::App* command = app.add_subcommand(s.name, s.help);
    commands.emplace_back(command, s.define(*command));
    refuse_meaningless_values(*command);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;  // the command line is wrong: nothing started
  }

  try {
    for (const auto& [command, run] : commands) {
      if (command->parsed()) return run();
    }
    return 2;  // unreachable: require_subcommand(1)
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
