#include "weight_sync/options_json.h"

#include "core/error.h"
#include "weight_sync/nccl_id.h"

namespace tandem {

nlohmann::json weight_sync_options_to_json(const WeightSyncOptions& o) {
  nlohmann::json json = {{"method", o.method},           {"address", o.address},       {"rank", o.rank},
                         {"world_size", o.world_size},   {"bucket_bytes", o.bucket_bytes},
                         {"timeout_s", o.timeout_s},     {"host", o.host},             {"cuda_device", o.cuda_device}};
  if (!o.nccl_unique_id.empty()) json["nccl_unique_id"] = nccl_unique_id_to_hex(o.nccl_unique_id);
  return json;
}

WeightSyncOptions weight_sync_options_from_json(const nlohmann::json& json, const std::string& where) {
  WeightSyncOptions o;
  try {
    o.method = json.at("method").get<std::string>();
    o.address = json.value("address", o.address);
    o.rank = json.value("rank", o.rank);
    o.world_size = json.value("world_size", o.world_size);
    o.bucket_bytes = json.value("bucket_bytes", o.bucket_bytes);
    o.timeout_s = json.value("timeout_s", o.timeout_s);
    o.host = json.value("host", o.host);
    o.cuda_device = json.value("cuda_device", o.cuda_device);
    if (json.contains("nccl_unique_id")) o.nccl_unique_id = nccl_unique_id_from_hex(json.at("nccl_unique_id").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: bad weight-sync transport {}: {}", where, json.dump(), e.what()));
  }
  return o;
}

std::string weight_sync_options_key(const WeightSyncOptions& o) {
  return weight_sync_options_to_json(o).dump();
}

}  // namespace tandem
