#include "core/command_body.h"

#include "core/error.h"

namespace tandem {

nlohmann::json command_json(const CommandMsg& command) {
  try {
    return nlohmann::json::parse(command.body);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: the body is not JSON: {}", command.name, e.what()));
  }
}

}  // namespace tandem
