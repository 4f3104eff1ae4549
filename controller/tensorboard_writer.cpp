#include "controller/tensorboard_writer.h"

#include "controller/run_status.h"
#include "core/error.h"
#include "core/net_address.h"
#include "tensorboard_event.pb.h"

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

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
  if (error) throw Error(fmt::format("logging.tensorboard: cannot create {}: {}", dir, error.message()));
  const double now = unix_now();
  path_ = fmt::format("{}/events.out.tfevents.{}.{}", dir, static_cast<int64_t>(now), this_hostname());
  // Two writers in one second (a resume right after a start): a suffix keeps files apart.
  for (int n = 1; std::filesystem::exists(path_); ++n) {
    path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, static_cast<int64_t>(now), this_hostname(), n);
  }
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw Error(fmt::format("logging.tensorboard: cannot create {}: {}", path_, std::strerror(errno)));
  tensorboard::Event version;
  version.set_wall_time(now);
  version.set_file_version("brain.Event:2");
  write_record(version.SerializeAsString());
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write(int64_t step, const MetricRow& row, double wall_time_unix) {
  tensorboard::Event event;
  event.set_wall_time(wall_time_unix);
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [key, value] : row) {
    if (key == "step") continue;
    tensorboard::SummaryValue* v = summary->add_value();
    v->set_tag(key);
    v->set_simple_value(static_cast<float>(value));
  }
  write_record(event.SerializeAsString());
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string record;
  put_u64(record, data.size());
  put_u32(record, masked_crc32c(record.data(), 8));
  record += data;
  put_u32(record, masked_crc32c(data.data(), data.size()));
  const long before = std::ftell(file_);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    const std::string why = std::strerror(errno);
    // Cut a torn record off, so that the file stays a whole sequence of records for readers.
    std::clearerr(file_);
    if (before >= 0 && std::fseek(file_, before, SEEK_SET) == 0) {
      std::error_code ignored;
      std::filesystem::resize_file(path_, static_cast<uintmax_t>(before), ignored);
    }
    throw Error(fmt::format("logging.tensorboard: cannot write {}: {}", path_, why));
  }
}

}  // namespace tandem
