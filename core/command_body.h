// The JSON body of a worker command, parsed once for every role's handler.
#pragma once

#include "core/protocol.h"

#include <nlohmann/json.hpp>

namespace tandem {

// The command's body as JSON; a body that is not JSON is an Error naming the command.
nlohmann::json command_json(const CommandMsg& command);

}  // namespace tandem
