// logging.tensorboard: RUN_DIR/tensorboard/events.out.tfevents.<unix seconds>.<host>,
// every metric as a TensorBoard scalar at its step (docs/tensorboard.md).
//
// A file is a sequence of TFRecords: the data's length (uint64, little endian), the
// masked CRC-32C of those 8 bytes, the data (an Event protobuf), the masked CRC-32C of
// the data. The first Event names the format version, "brain.Event:2".
//
// Steps written again (a resumed run re-runs the steps after its checkpoint, in a new file;
// a learner restart re-runs them in the same one) would show twice in TensorBoard. So before
// its first step, and before any step not past the last one it wrote, the writer adds a
// SessionLog START at that step: TensorBoard's loader treats every START of a run but the
// first as a restart and drops the points it has read at that step and later.
#pragma once

#include "controller/run/metrics_writer.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem {

// CRC-32C (Castagnoli), and TFRecord's masked form of it (rotated and offset, so that a
// checksum stored inside checksummed data does not weaken the outer one).
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

// Not thread-safe: the training loop writes from one thread.
class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it (a resumed run adds a file; TensorBoard reads
  // every file of the directory). Throws Error naming the directory or file when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event holding a scalar per key of `row` but "step", rounded to float32: NaN and
  // infinities as they are, finite values past float's range as infinities. One call per
  // step: a second call with a step not past the last counts as a re-run (see above).
  // Written straight to the file (no user-space buffer), so a reader sees the step at once.
  // Throws Error naming the file when the write fails (disk full); the file is cut back to
  // the records before it.
  void write(int64_t step, const MetricRow& row, double wall_time_unix);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes of whole records in the file
  bool wrote_step_ = false;
  int64_t last_step_ = 0;  // the step of the last summary written, once wrote_step_
};

}  // namespace tandem
