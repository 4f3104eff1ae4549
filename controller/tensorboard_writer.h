// logging.tensorboard: RUN_DIR/tensorboard/events.out.tfevents.<unix seconds>.<host>,
// every metric as a TensorBoard scalar at its step. A file is a sequence of TFRecords
// (length, masked CRC-32C of the length, an Event protobuf, masked CRC-32C of it); the
// first Event names the format version, "brain.Event:2".
#pragma once

#include "controller/metrics_writer.h"

#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem {

// CRC-32C (Castagnoli), and TFRecord's masked form of it.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it (a resumed run adds a file; TensorBoard reads
  // them all). Throws Error naming the file when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event with a scalar per key of `row` but "step" (NaN and infinities as they are),
  // flushed so that TensorBoard sees the step at once. Throws Error naming the file when
  // the write fails; the records before it stay whole.
  void write(int64_t step, const MetricRow& row, double wall_time_unix);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tandem
