// `tandem plot RUN_DIR`: the SVG charts it draws from metrics.jsonl map the data to the
// plot area exactly, gaps stay gaps, and bad input ends in the documented exit codes.
// (Legends and the charts of the per-step metrics: test_plot_charts.cpp.)
#include "tests/support/plot_svg_reading.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

using namespace tandem;
using namespace tandem::testing;
namespace fs = std::filesystem;

TEST_CASE("plot draws every group; points map to the plot area; gaps split the line") {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);
  const unsigned seed = std::random_device()();
  INFO("seed ", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-2.0, 3.0);

  const int steps = 12;
  std::vector<double> mean(steps), std_dev(steps), kl(steps), length(steps);
  std::string jsonl;
  for (int i = 0; i < steps; ++i) {
    mean[i] = uniform(rng);
    std_dev[i] = 0.05 + std::abs(uniform(rng)) / 4;
    kl[i] = (i == 4 || i == 6) ? kNaN : 0.001 * (1 + std::abs(uniform(rng)));  // steps 5, 7: gaps, step 6 alone
    length[i] = 10 + 5 * std::abs(uniform(rng));
    jsonl += fmt::format(
        "{{\"step\":{},\"weight_version\":{},\"reward/mean\":{},\"reward/std\":{},\"response/length_mean\":{},"
        "\"actor/kl\":{},\"time/rollout_s\":0.5,\"time/reward_s\":0.01,\"time/train_s\":{},\"time/sync_s\":0.02,"
        "\"time/step_s\":1.5,\"perf/rollout_tokens_per_s\":{}}}\n",
        i + 1, i + 1, json_number(mean[i]), json_number(std_dev[i]), json_number(length[i]), json_number(kl[i]),
        0.9 + i * 0.01, 1000 + 10 * i);
  }
  write_text(run + "/metrics.jsonl", jsonl);

  const PlotRun result = run_plot(dir, {run});
  INFO(result.output);
  REQUIRE(result.status.success());
  for (const char* file : {"reward.svg", "kl.svg", "response_length.svg", "timings.svg", "throughput.svg", "index.html"}) {
    CHECK(fs::exists(run + "/plots/" + file));
    CHECK(result.output.find("wrote " + run + "/plots/" + file) != std::string::npos);
  }
  // No actor/entropy in the rows: that chart is skipped and the output says so.
  CHECK_FALSE(fs::exists(run + "/plots/entropy.svg"));
  CHECK(result.output.find("skipped entropy.svg: no actor/entropy in metrics.jsonl") != std::string::npos);
  const std::string index = read_text(run + "/plots/index.html");
  CHECK(index.find("<img src=\"reward.svg\"") != std::string::npos);
  CHECK(index.find("entropy.svg: no actor/entropy") != std::string::npos);

  SUBCASE("reward: the mean maps linearly, the ±std band spans the plot area exactly") {
    const std::string svg = read_text(run + "/plots/reward.svg");
    check_well_formed(svg, "reward.svg");
    const Area area = plot_area(svg);
    double lo = mean[0] - std_dev[0], hi = mean[0] + std_dev[0];
    for (int i = 0; i < steps; ++i) lo = std::min(lo, mean[i] - std_dev[i]), hi = std::max(hi, mean[i] + std_dev[i]);
    const std::vector<PathPoint> points = path_points(series_d(svg, "reward/mean"));
    REQUIRE(points.size() == static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i) {
      INFO("step ", i + 1);
      CHECK(points[i].command == (i == 0 ? 'M' : 'L'));
      const double x = area.left + (area.right - area.left) * i / (steps - 1);
      const double y = area.bottom - (area.bottom - area.top) * (mean[i] - lo) / (hi - lo);
      CHECK(std::abs(points[i].x - x) < 0.01);  // coordinates are written with 2 decimals
      CHECK(std::abs(points[i].y - y) < 0.01);
    }
    const auto bands = elements(svg, "path", "class=\"band\"");
    REQUIRE(bands.size() == 1);
    const std::vector<PathPoint> band = path_points(attribute(bands[0], "d"));
    CHECK(band.size() == static_cast<size_t>(2 * steps));
    double band_top = band[0].y, band_bottom = band[0].y;
    for (const PathPoint& p : band) band_top = std::min(band_top, p.y), band_bottom = std::max(band_bottom, p.y);
    CHECK(std::abs(band_top - area.top) < 0.01);       // max(mean + std) at the top edge
    CHECK(std::abs(band_bottom - area.bottom) < 0.01); // min(mean - std) at the bottom edge
    CHECK(svg.find(">reward/mean</text>") != std::string::npos);  // legend
    CHECK(svg.find(">Reward</text>") != std::string::npos);       // title
    CHECK(elements(svg, "text", "").size() >= 8);                  // tick labels at least
  }

  SUBCASE("kl: one path point per finite value, a new run after each gap, a marker on the lone point") {
    const std::string svg = read_text(run + "/plots/kl.svg");
    check_well_formed(svg, "kl.svg");
    const Area area = plot_area(svg);
    const std::vector<PathPoint> points = path_points(series_d(svg, "actor/kl"));
    CHECK(points.size() == static_cast<size_t>(steps - 2));
    CHECK(std::count_if(points.begin(), points.end(), [](const PathPoint& p) { return p.command == 'M'; }) == 3);
    CHECK(elements(svg, "circle", "class=\"marker\"").size() == 1);
    double lo = INFINITY, hi = -INFINITY;
    for (double v : kl) {
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    size_t k = 0;
    for (int i = 0; i < steps; ++i) {
      if (!std::isfinite(kl[i])) continue;
      INFO("step ", i + 1);
      CHECK(std::abs(points[k].x - (area.left + (area.right - area.left) * i / (steps - 1))) < 0.01);
      CHECK(std::abs(points[k].y - (area.bottom - (area.bottom - area.top) * (kl[i] - lo) / (hi - lo))) < 0.01);
      ++k;
    }
  }

  SUBCASE("timings: every time/* series with a legend entry") {
    const std::string svg = read_text(run + "/plots/timings.svg");
    check_well_formed(svg, "timings.svg");
    for (const char* key : {"time/rollout_s", "time/reward_s", "time/train_s", "time/sync_s", "time/step_s"}) {
      INFO(key);
      CHECK(path_points(series_d(svg, key)).size() == static_cast<size_t>(steps));
      CHECK(svg.find(std::string(">") + key + "</text>") != std::string::npos);
    }
    const Area area = plot_area(svg);
    // time/step_s (1.5) is the largest: on the top edge. Durations are drawn from 0: 0 is
    // the bottom edge, so time/reward_s (0.01) sits 0.01 / 1.5 of the height above it.
    for (const PathPoint& p : path_points(series_d(svg, "time/step_s"))) CHECK(std::abs(p.y - area.top) < 0.01);
    for (const PathPoint& p : path_points(series_d(svg, "time/reward_s"))) {
      CHECK(std::abs(p.y - (area.bottom - (area.bottom - area.top) * 0.01 / 1.5)) < 0.01);
    }
  }
}

TEST_CASE("plot: one step, --out, a resumed run's repeated steps, unusable values") {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);

  SUBCASE("a run of one step draws a marked point in the middle") {
    write_text(run + "/metrics.jsonl", "{\"step\":1,\"reward/mean\":0.25,\"reward/std\":0,\"actor/kl\":null}\n");
    const PlotRun result = run_plot(dir, {run, "--out", dir.path() + "/elsewhere"});
    INFO(result.output);
    REQUIRE(result.status.success());
    CHECK_FALSE(fs::exists(run + "/plots"));
    const std::string svg = read_text(dir.path() + "/elsewhere/reward.svg");
    check_well_formed(svg, "reward.svg");
    const Area area = plot_area(svg);
    const std::vector<PathPoint> points = path_points(series_d(svg, "reward/mean"));
    REQUIRE(points.size() == 1);
    CHECK(std::abs(points[0].x - (area.left + area.right) / 2) < 0.01);
    CHECK(std::abs(points[0].y - (area.top + area.bottom) / 2) < 0.01);
    CHECK(elements(svg, "circle", "class=\"marker\"").size() == 1);
    CHECK(result.output.find("skipped kl.svg: no finite actor/kl values") != std::string::npos);
    CHECK(result.output.find("skipped timings.svg") != std::string::npos);
  }

  SUBCASE("a step written twice (a resumed run) is drawn once, with the later value") {
    write_text(run + "/metrics.jsonl",
               "{\"step\":1,\"reward/mean\":0}\n{\"step\":2,\"reward/mean\":5}\n{\"step\":3,\"reward/mean\":5}\n"
               "{\"step\":2,\"reward/mean\":1}\n{\"step\":3,\"reward/mean\":2}\n{\"step\":4,\"reward/mean\":\"NaN\"}\n"
               "{\"step\":5,\"reward/mean\":3}\n");
    const PlotRun result = run_plot(dir, {run});
    INFO(result.output);
    REQUIRE(result.status.success());
    const std::string svg = read_text(run + "/plots/reward.svg");
    const Area area = plot_area(svg);
    const std::vector<PathPoint> points = path_points(series_d(svg, "reward/mean"));
    REQUIRE(points.size() == 4);  // steps 1, 2, 3 and 5; step 4 is a gap
    CHECK(std::abs(points[3].y - area.top) < 0.01);     // 3 is the largest value: the 5s were replaced
    CHECK(std::abs(points[0].y - area.bottom) < 0.01);  // 0 the smallest
    CHECK(points[3].command == 'M');
    CHECK(result.output.find("reward.svg band (±reward/std): no reward/std in metrics.jsonl") != std::string::npos);
  }

  SUBCASE("a half-written last line (a live run) is skipped with a warning") {
    write_text(run + "/metrics.jsonl", "{\"step\":1,\"reward/mean\":0.5}\n{\"step\":2,\"reward/mea");
    const PlotRun result = run_plot(dir, {run});
    INFO(result.output);
    CHECK(result.status.success());
    CHECK(result.output.find("metrics.jsonl:2: skipped the unfinished last line") != std::string::npos);
  }
}

TEST_CASE("plot errors: a malformed line is exit 1 naming file:line; no run or no metrics is exit 2") {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);
  const std::string metrics = run + "/metrics.jsonl";

  write_text(metrics, "{\"step\":1,\"reward/mean\":0.5}\n\n{\"step\":2,\"reward/mean\":0.5,}\n{\"step\":3}\n");
  PlotRun result = run_plot(dir, {run});
  CHECK(result.status.exit_code == 1);
  CHECK_MESSAGE(result.output.find(metrics + ":3: not valid JSON") != std::string::npos, result.output);

  write_text(metrics, "{\"step\":1,\"reward/mean\":0.5}\n[1, 2]\n");
  result = run_plot(dir, {run});
  CHECK(result.status.exit_code == 1);
  CHECK_MESSAGE(result.output.find(metrics + ":2: expected a JSON object") != std::string::npos, result.output);

  write_text(metrics, "{\"reward/mean\":0.5}\n");
  result = run_plot(dir, {run});
  CHECK(result.status.exit_code == 1);
  CHECK_MESSAGE(result.output.find(metrics + ":1: the row has no numeric \"step\"") != std::string::npos, result.output);

  write_text(metrics, "");
  result = run_plot(dir, {run});
  CHECK(result.status.exit_code == 2);
  CHECK_MESSAGE(result.output.find("has no steps yet") != std::string::npos, result.output);

  fs::remove(metrics);
  result = run_plot(dir, {run});
  CHECK(result.status.exit_code == 2);
  CHECK_MESSAGE(result.output.find(metrics + " does not exist") != std::string::npos, result.output);

  result = run_plot(dir, {dir.path() + "/no-such-run"});
  CHECK(result.status.exit_code == 2);
  CHECK_MESSAGE(result.output.find("no-such-run is not a run directory (it does not exist)") != std::string::npos,
                result.output);
  CHECK_FALSE(fs::exists(dir.path() + "/no-such-run"));

  result = run_plot(dir, {});
  CHECK(result.status.exit_code == 2);  // the command line itself is wrong
}
