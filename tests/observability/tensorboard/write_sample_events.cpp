// Test-only: writes a TensorBoard event file with tandem's writer and prints what it wrote,
// one JSON line per scalar {"step", "tag", "value", "wall_time"} (value as the double given,
// "nan", "inf" or "-inf"), for test_event_files.py to compare with the independent reader.
//
//   write_sample_events DIR                      rows of fresh random scalars, NaN, infinities,
//                                                values at the edges of float's range; steps
//                                                1..25, 2^40, then 24 and 25 again (a re-run)
//   write_sample_events --file-size-limit N DIR  the same rows with the file capped at N bytes
//                                                (RLIMIT_FSIZE: a full disk); prints the writer's
//                                                error as {"error": ...}, lifts the cap, writes on
#include "controller/observe/tensorboard_writer.h"
#include "core/error.h"

#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>

namespace {

std::string json_number(double value) {
  if (std::isnan(value)) return "\"nan\"";
  if (std::isinf(value)) return value > 0 ? "\"inf\"" : "\"-inf\"";
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g", value);  // 17 digits: the double itself
  return text;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

void print_row(int64_t step, const tandem::MetricRow& row, double wall_time) {
  for (const auto& [tag, value] : row) {
    if (tag == "step") continue;
    std::printf("{\"step\": %lld, \"tag\": %s, \"value\": %s, \"wall_time\": %s}\n", static_cast<long long>(step),
                json_string(tag).c_str(), json_number(value).c_str(), json_number(wall_time).c_str());
  }
}

// Forty random tags in four groups: values spread over 2^-60..2^60 with both signs, one in
// ten a NaN or an infinity. Every row also has the fixed edge cases.
tandem::MetricRow sample_row(int64_t step, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-60, 60);
  std::uniform_int_distribution<int> special(0, 29);
  tandem::MetricRow row = {{"step", static_cast<double>(step)}};
  for (int k = 0; k < 40; ++k) {
    double value = std::ldexp(mantissa(rng), exponent(rng));
    const int s = special(rng);
    if (s == 0) value = std::numeric_limits<double>::quiet_NaN();
    if (s == 1) value = std::numeric_limits<double>::infinity();
    if (s == 2) value = -std::numeric_limits<double>::infinity();
    row.emplace_back("group" + std::to_string(k % 4) + "/metric_" + std::to_string(k), value);
  }
  row.emplace_back("edge/zero", 0.0);
  row.emplace_back("edge/float_max", static_cast<double>(std::numeric_limits<float>::max()));
  row.emplace_back("edge/rounds_to_float_max", 0x1.fffffe8p127);  // between FLT_MAX and the overflow midpoint
  row.emplace_back("edge/overflows", 0x1.ffffffp127);             // the midpoint: ties to even, 2^128, infinity
  row.emplace_back("edge/huge_negative", -1e300);
  row.emplace_back("edge/subnormal", 1e-40);
  row.emplace_back("edge/underflows", 1e-50);
  row.emplace_back("edge/not_float_exact", 0.1);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  long long file_size_limit = -1;
  if (argc == 4 && std::strcmp(argv[1], "--file-size-limit") == 0) {
    file_size_limit = std::atoll(argv[2]);
  } else if (argc != 2) {
    std::fprintf(stderr, "usage: write_sample_events [--file-size-limit BYTES] DIR\n");
    return 2;
  }
  const std::string dir = argv[argc - 1];
  const uint64_t seed = std::random_device{}();
  std::fprintf(stderr, "write_sample_events: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  try {
    tandem::TensorBoardWriter writer(dir);
    if (file_size_limit < 0) {
      for (int64_t step = 1; step <= 25; ++step) {
        const tandem::MetricRow row = sample_row(step, rng);
        const double wall_time = 1.7e9 + static_cast<double>(step) + 0.25;
        writer.write(step, row, wall_time);
        print_row(step, row, wall_time);
      }
      const int64_t big_step = int64_t{1} << 40;  // a step past 32 bits
      const tandem::MetricRow big = sample_row(big_step, rng);
      writer.write(big_step, big, 1.8e9);
      print_row(big_step, big, 1.8e9);
      // A re-run from step 24 (a learner restart): the writer marks it for TensorBoard.
      for (int64_t step = 24; step <= 25; ++step) {
        const tandem::MetricRow row = sample_row(step, rng);
        writer.write(step, row, 1.9e9 + static_cast<double>(step));
        print_row(step, row, 1.9e9 + static_cast<double>(step));
      }
      return 0;
    }
    // A full disk: writes fail with EFBIG past the cap (SIGXFSZ ignored, as it would kill us).
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit original{};
    getrlimit(RLIMIT_FSIZE, &original);
    rlimit capped = original;
    capped.rlim_cur = static_cast<rlim_t>(file_size_limit);
    if (setrlimit(RLIMIT_FSIZE, &capped) != 0) {
      std::fprintf(stderr, "write_sample_events: setrlimit: %s\n", std::strerror(errno));
      return 1;
    }
    int64_t step = 1;
    for (;; ++step) {
      const tandem::MetricRow row = sample_row(step, rng);
      try {
        writer.write(step, row, 1.7e9 + static_cast<double>(step));
      } catch (const tandem::Error& e) {
        std::printf("{\"error\": %s}\n", json_string(e.what()).c_str());
        break;
      }
      print_row(step, row, 1.7e9 + static_cast<double>(step));
    }
    setrlimit(RLIMIT_FSIZE, &original);  // space freed: the same writer continues the file
    const tandem::MetricRow row = sample_row(step, rng);
    writer.write(step, row, 1.7e9 + static_cast<double>(step));
    print_row(step, row, 1.7e9 + static_cast<double>(step));
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "write_sample_events: %s\n", e.what());
    return 1;
  }
  return 0;
}
