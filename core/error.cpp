#include "core/error.h"

namespace tandem {

void throw_check_failure(const char* file, int line, const char* condition,
                         const std::string& message) {
  throw Error(fmt::format("{} ({}:{}: check '{}' failed)", message, file, line, condition));
}

}  // namespace tandem
