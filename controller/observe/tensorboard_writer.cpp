#include "controller/observe/tensorboard_writer.h"

#include "controller/run/run_status.h"
#include "core/error.h"
#include "core/net_address.h"
#include "tensorboard_event.pb.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

namespace tandem {
namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli polynomial
    table[i] = c;
  }
  return table;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// A double as TensorBoard's float32 simple_value, rounded to nearest as IEEE does. A finite
// double beyond float's range is undefined behaviour for a plain cast, so that case is
// spelled out: below the midpoint between FLT_MAX and 2^128 it rounds to FLT_MAX, from
// there on to infinity.
float to_simple_value(double value) {
  constexpr double float_max = std::numeric_limits<float>::max();
  constexpr double overflow_from = 0x1.ffffffp127;  // 2^128 - 2^103
  const double magnitude = std::fabs(value);
  if (!std::isfinite(value) || magnitude <= float_max) return static_cast<float>(value);
  const float rounded = magnitude < overflow_from ? std::numeric_limits<float>::max()
                                                  : std::numeric_limits<float>::infinity();
  return value > 0 ? rounded : -rounded;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ bytes[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw Error(fmt::format("logging.tensorboard: cannot create the directory {}: {}", dir, error.message()));
  const double now = unix_now();
  const std::string base = fmt::format("{}/events.out.tfevents.{}.{}", dir, static_cast<int64_t>(now), this_hostname());
  // A file of this name already there (a resume within the same second): a suffix keeps
  // the files apart; TensorBoard reads any file whose name holds "tfevents".
  for (int n = 0; fd_ < 0; ++n) {
    path_ = n == 0 ? base : fmt::format("{}.{}", base, n);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && (errno != EEXIST || n >= 1000)) {
      throw Error(fmt::format("logging.tensorboard: cannot create {}: {}", path_, std::strerror(errno)));
    }
  }
  tensorboard::Event version;
  version.set_wall_time(now);
  version.set_file_version("brain.Event:2");
  try {
    write_record(version.SerializeAsString());
  } catch (...) {
    ::close(fd_);  // the destructor does not run for a constructor that throws
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::write(int64_t step, const MetricRow& row, double wall_time_unix) {
  if (!wrote_step_ || step <= last_step_) {
    tensorboard::Event start;
    start.set_wall_time(wall_time_unix);
    start.set_step(step);
    start.mutable_session_log()->set_status(tensorboard::SessionLog::START);
    write_record(start.SerializeAsString());
  }
  tensorboard::Event event;
  event.set_wall_time(wall_time_unix);
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [key, value] : row) {
    if (key == "step") continue;
    tensorboard::SummaryValue* scalar = summary->add_value();
    scalar->set_tag(key);
    scalar->set_simple_value(to_simple_value(value));
  }
  write_record(event.SerializeAsString());
  wrote_step_ = true;
  last_step_ = step;
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string record;
  put_u64(record, data.size());
  put_u32(record, masked_crc32c(record.data(), 8));
  record += data;
  put_u32(record, masked_crc32c(data.data(), data.size()));
  size_t written = 0;
  while (written < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + written, record.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      const std::string why = n < 0 ? std::strerror(errno) : "the write wrote nothing";
      // Cut the torn record off, so that the file stays a whole sequence of records for
      // readers and a later write (space freed) continues it.
      const bool cut = ::ftruncate(fd_, static_cast<off_t>(size_)) == 0 &&
                       ::lseek(fd_, static_cast<off_t>(size_), SEEK_SET) == static_cast<off_t>(size_);
      throw Error(fmt::format("logging.tensorboard: cannot write {}: {}{}", path_, why,
                              cut ? "" : " (and could not cut the partial record off)"));
    }
  }
  size_ += record.size();
}

}  // namespace tandem
