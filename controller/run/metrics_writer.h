// metrics.jsonl: one flat JSON object per step, keys in the order given (DESIGN.md
// names them: step, time/step_s, ...). Each line is written and flushed whole.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

using MetricRow = std::vector<std::pair<std::string, double>>;

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // empty path: writes nothing
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const MetricRow& row);
  // One JSON object already formatted (samples.jsonl rows), written and flushed whole.
  void write_line(const std::string& json_object);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// The JSON text of one row (NaN and infinities become null, as JSON has no such numbers).
std::string metric_row_json(const MetricRow& row);

}  // namespace tandem
