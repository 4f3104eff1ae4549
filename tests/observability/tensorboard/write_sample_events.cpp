// Test-only: writes a TensorBoard event file with tandem's writer, rows of fresh random
// scalars (NaN and infinities among them), and prints what it wrote as JSON lines
// {"step", "tag", "value"} for test_tensorboard.py to compare with the independent reader.
#include "controller/tensorboard_writer.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_sample_events DIR\n");
    return 2;
  }
  std::random_device seed;
  std::mt19937_64 rng(seed());
  std::uniform_real_distribution<double> magnitude(-30, 30);
  std::uniform_int_distribution<int> special(0, 19);
  tandem::TensorBoardWriter writer(argv[1]);
  for (int64_t step = 1; step <= 25; ++step) {
    tandem::MetricRow row = {{"step", static_cast<double>(step)}};
    for (int k = 0; k < 40; ++k) {
      double value = std::ldexp(magnitude(rng) / 30.0, static_cast<int>(magnitude(rng)));
      const int s = special(rng);
      if (s == 0) value = std::numeric_limits<double>::quiet_NaN();
      if (s == 1) value = std::numeric_limits<double>::infinity();
      if (s == 2) value = -std::numeric_limits<double>::infinity();
      row.emplace_back("group" + std::to_string(k % 4) + "/metric_" + std::to_string(k), value);
    }
    writer.write(step, row, 1.7e9 + static_cast<double>(step));
    for (const auto& [tag, value] : row) {
      if (tag == "step") continue;
      const float f = static_cast<float>(value);
      if (std::isnan(f)) {
        std::printf("{\"step\": %lld, \"tag\": \"%s\", \"value\": null}\n", static_cast<long long>(step), tag.c_str());
      } else if (std::isinf(f)) {
        std::printf("{\"step\": %lld, \"tag\": \"%s\", \"value\": \"%s\"}\n", static_cast<long long>(step), tag.c_str(),
                    f > 0 ? "inf" : "-inf");
      } else {
        std::printf("{\"step\": %lld, \"tag\": \"%s\", \"value\": %.9g}\n", static_cast<long long>(step), tag.c_str(),
                    static_cast<double>(f));
      }
    }
  }
  return 0;
}
