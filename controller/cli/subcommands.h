// The `tandem` subcommands as a table: controller/main.cpp adds each one, parses the
// command line, and runs the one named. Each entry's `define` adds its options to its
// CLI11 subcommand and returns what runs it once the line is parsed.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace tandem {

struct Subcommand {
  const char* name;
  const char* help;
  std::function<std::function<int()>(CLI::App& command)> define;
};

// Every subcommand, in the order `tandem --help` lists them.
const std::vector<Subcommand>& subcommands();

// Checks every option of `command` (and its own subcommands) gets for values no option
// means: a number that is not finite (`--temperature nan`), an empty text (`--run-dir ''`).
// Texts where empty is a value (`--prompt ''`) are left alone.
void refuse_meaningless_values(CLI::App& command);

}  // namespace tandem
