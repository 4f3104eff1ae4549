#pragma once

#include "core/config.h"

#include <string>
#include <vector>

namespace tandem {

// Cross-field rules (batch arithmetic, algorithm combinations), checked once every
// field is valid on its own. Appends one message per broken rule, naming the numbers.
void check_config_rules(const LoadedConfig& loaded, std::vector<std::string>& problems);

}  // namespace tandem
