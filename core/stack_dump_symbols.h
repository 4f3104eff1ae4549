// Private to core/stack_dump.cpp: a dump's frames as text, each return address named by
// function, file and line (libbacktrace, inlined callers too) or by function only (dladdr)
// where the line tables are missing. Runs on the dumper thread, never in a signal handler:
// it allocates and reads debug information.
#pragma once

#include <string>
#include <vector>

namespace tandem {

// Appends one line per frame (more where calls were inlined) to `out`, innermost first:
// "  #N 0x<pc> <function> at <file>:<line>" (or "in <module>" without a line table).
void stack_dump_append_frames(const std::vector<void*>& frames, std::string& out);

}  // namespace tandem
