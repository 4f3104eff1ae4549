#include "rollout/rollout_role.h"

#include "core/error.h"

namespace tandem {

CommandHandler rollout_command_handler() {
  return [](const CommandMsg& command, const std::vector<std::string>&) -> CommandResult {
    throw Error(fmt::format("rollout worker: unknown command \"{}\" (known: ping, describe)", command.name));
  };
}

}  // namespace tandem
