// The one message for a name that is not in a list of known names (objectives, modes).
#pragma once

#include <string>
#include <vector>

namespace tandem {

// Throws tandem::Error: `unknown <what> "<name>" (did you mean X?); known: a, b or c`.
[[noreturn]] void throw_unknown_name(const std::string& what, const std::string& name,
                                     const std::vector<std::string>& known);

}  // namespace tandem
