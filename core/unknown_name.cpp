#include "core/unknown_name.h"

#include "core/error.h"
#include "core/text.h"

namespace tandem {

void throw_unknown_name(const std::string& what, const std::string& name, const std::vector<std::string>& known) {
  const std::string guess = closest_match(name, known);
  throw Error(fmt::format("unknown {} {}{}; known: {}", what, quoted(name),
                          guess.empty() ? "" : " (did you mean " + guess + "?)", join_choices(known)));
}

}  // namespace tandem
