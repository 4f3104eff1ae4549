// placeholder until it lands
#include "controller/cli.h"
#include "core/error.h"
namespace tandem {
int cli_generate(const GenerateArgs&) { throw UsageError("tandem: not implemented yet"); }
}  // namespace tandem
