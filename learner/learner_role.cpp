#include "learner/learner_role.h"

#include "core/error.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

namespace tandem {

CommandHandler learner_command_handler() {
  return [](const CommandMsg& command, const std::vector<std::string>&) -> CommandResult {
    if (command.name == "torch_info") {
      return {fmt::format("{{\"libtorch\":\"{}\",\"intra_op_threads\":{}}}", TORCH_VERSION, at::get_num_threads()),
              {}};
    }
    throw Error(fmt::format("learner worker: unknown command \"{}\" (known: ping, describe, torch_info)",
                            command.name));
  };
}

}  // namespace tandem
