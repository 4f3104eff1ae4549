// WeightSyncOptions in a command body: the controller tells each worker its part of a
// sync ({"method", "address", "rank", ...}; the NCCL unique id as hex), and workers keep
// one sender or receiver per distinct group (options_key).
#pragma once

#include "weight_sync/transport.h"

#include <nlohmann/json.hpp>

#include <string>

namespace tandem {

nlohmann::json weight_sync_options_to_json(const WeightSyncOptions& options);
// Throws Error naming `where` and the field that is missing or of the wrong type.
WeightSyncOptions weight_sync_options_from_json(const nlohmann::json& json, const std::string& where);

// Equal keys: the same segment or group, so a kept sender or receiver can serve it.
std::string weight_sync_options_key(const WeightSyncOptions& options);

}  // namespace tandem
