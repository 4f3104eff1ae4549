#pragma once

#include "core/error.h"

#include <string>
#include <vector>

namespace tandem {

// Every problem found in a config, reported together. A UsageError: exit code 2.
class ConfigError : public UsageError {
 public:
  explicit ConfigError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

}  // namespace tandem
