#include "controller/run/metrics_writer.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>

namespace tandem {

std::string metric_row_json(const MetricRow& row) {
  std::string out = "{";
  for (size_t i = 0; i < row.size(); ++i) {
    const auto& [key, value] = row[i];
    if (i > 0) out += ",";
    // Keys carry reward and part names a plugin chose: escaped, so that any name keeps the line JSON.
    out += nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ":";
    if (!std::isfinite(value)) {
      out += "null";
    } else if (value == std::floor(value) && std::fabs(value) < 1e15) {
      out += fmt::format("{}", static_cast<int64_t>(value));
    } else {
      out += fmt::format("{}", value);
    }
  }
  return out + "}";
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) throw Error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const MetricRow& row) { write_line(metric_row_json(row)); }

void MetricsWriter::write_line(const std::string& json_object) {
  if (!file_) return;
  const std::string line = json_object + "\n";
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0) {
    throw Error(fmt::format("cannot append to {}: {}", path_, std::strerror(errno)));
  }
}

}  // namespace tandem
