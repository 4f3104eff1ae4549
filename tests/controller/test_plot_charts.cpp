// `tandem plot RUN_DIR`: legends that fit their canvas, and the charts of what a
// researcher reads each step (rewards and their parts, ratio, advantages, lengths),
// skipped and named when their metrics are absent.
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

TEST_CASE("plot legends fit the canvas: long names, wrapped names, many series") {
  // Before the fix the legend had a fixed 144-px column at the right edge: the text of
  // perf/rollout_tokens_per_s (151 px in DejaVu Sans) was cut by the canvas edge, and
  // rows past the 18th fell below the bottom.
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);
  const unsigned seed = std::random_device()();
  INFO("seed ", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(0.1, 2.0);
  const int steps = 5;
  auto values = [&] {
    std::vector<double> v(steps);
    for (double& x : v) x = uniform(rng);
    return v;
  };
  const std::string long_reward = "reward/a_reward_whose_name_is_long_enough_that_its_legend_entry_has_to_wrap";
  const std::string unbroken_reward = "reward/" + std::string(60, 'W');  // no break point: wraps inside the word
  std::vector<std::pair<std::string, std::vector<double>>> columns = {
      {"reward/mean", values()},          {"reward/std", values()},
      {"reward/format", values()},        {long_reward, values()},
      {unbroken_reward, values()},        {"reward/format/length", values()},
      {"perf/rollout_tokens_per_s", values()}, {"perf/train_tokens_per_s", values()},
  };
  std::vector<std::string> timing_names;
  for (int k = 0; k < 26; ++k) timing_names.push_back(fmt::format("time/phase_{:02}_s", k));
  for (const std::string& key : timing_names) columns.emplace_back(key, values());
  write_text(run + "/metrics.jsonl", jsonl_of(columns, steps));

  const PlotRun result = run_plot(dir, {run});
  INFO(result.output);
  REQUIRE(result.status.success());
  const std::string plots = run + "/plots/";

  const std::string throughput = read_text(plots + "throughput.svg");
  check_well_formed(throughput, "throughput.svg");
  check_legend_fits(throughput, {"perf/rollout_tokens_per_s", "perf/train_tokens_per_s"}, "throughput.svg");
  CHECK(throughput.find(">perf/rollout_tokens_per_s</text>") != std::string::npos);  // short enough for one line

  const std::string rewards = read_text(plots + "rewards.svg");
  check_well_formed(rewards, "rewards.svg");
  check_legend_fits(rewards, {"reward/format", long_reward, unbroken_reward}, "rewards.svg");
  const auto entries = legend_entries(rewards);
  CHECK(entries[1].size() >= 2);  // the long name wraps rather than widening the chart without bound
  CHECK(entries[2].size() >= 2);
  CHECK(entries[1][0].text.back() == '_');  // broken after a '_', not inside a word

  const std::string timings = read_text(plots + "timings.svg");
  check_well_formed(timings, "timings.svg");
  check_legend_fits(timings, timing_names, "timings.svg");  // 26 rows: the canvas grows taller

  const std::string reward = read_text(plots + "reward.svg");
  check_legend_fits(reward, {"reward/mean", "±1 reward/std"}, "reward.svg");
  CHECK(reward.find("width=\"760\" height=\"420\"") != std::string::npos);  // short legends keep the usual size

  const std::string part = read_text(plots + "reward_format_length.svg");
  check_legend_fits(part, {"reward/format/length"}, "reward_format_length.svg");
}

TEST_CASE("plot draws what a researcher reads each step: rewards and their parts, ratio, advantages, lengths") {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);
  const unsigned seed = std::random_device()();
  INFO("seed ", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(0.05, 1.0);
  const int steps = 9;
  auto values = [&](double scale, double offset) {
    std::vector<double> v(steps);
    for (double& x : v) x = offset + scale * uniform(rng);
    return v;
  };
  std::vector<double> length_mean = values(40, 60), length_min(steps), length_max(steps);
  std::vector<double> adv_mean = values(0.2, -0.1), adv_min(steps), adv_max(steps);
  std::vector<double> ratio_mean = values(0.02, 0.99), ratio_min(steps), ratio_max(steps);
  for (int i = 0; i < steps; ++i) {
    length_min[i] = length_mean[i] - 50 * uniform(rng);
    length_max[i] = length_mean[i] + 50 * uniform(rng);
    adv_min[i] = adv_mean[i] - 2 * uniform(rng);
    adv_max[i] = adv_mean[i] + 2 * uniform(rng);
    ratio_min[i] = ratio_mean[i] - 0.3 * uniform(rng);
    ratio_max[i] = ratio_mean[i] + 0.3 * uniform(rng);
  }
  const std::vector<double> clip = values(0.5, 0.1);
  // file name -> the reward part it draws: characters outside [A-Za-z0-9_-] become '_'
  // (one per character, not per byte), and names that meet get -2.
  const std::vector<std::pair<std::string, std::string>> parts = {
      {"reward_math_correct.svg", "reward/math/correct"},
      {"reward_math_format.svg", "reward/math/format"},
      {"reward_length-v2_too_long.svg", "reward/length-v2/too.long"},
      {"reward_a_b_c.svg", "reward/a_b/c"},
      {"reward_a_b_c-2.svg", "reward/a/b_c"},
      {"reward_gr__e_x.svg", "reward/größe/x"},
  };
  std::vector<std::pair<std::string, std::vector<double>>> columns = {
      {"reward/mean", values(1, 0)},  {"reward/std", values(0.2, 0)},   {"reward/fallbacks", values(0, 0)},
      {"reward/timeouts", values(40, 1)},  // a count per step: not on the reward axis
      {"reward/math", values(1, 0)},  {"reward/length-v2", values(0.5, -0.5)},
      {"response/length_mean", length_mean}, {"response/length_max", length_max}, {"response/length_min", length_min},
      {"response/clip_ratio", clip},  {"prompt/length_mean", values(30, 20)},
      {"critic/advantages/mean", adv_mean}, {"critic/advantages/max", adv_max}, {"critic/advantages/min", adv_min},
      {"actor/ratio_mean", ratio_mean}, {"actor/ratio_max", ratio_max}, {"actor/ratio_min", ratio_min},
      {"reward/x/y/z", values(1, 0)},  // three levels: neither a reward nor a part
  };
  for (const auto& [file, key] : parts) columns.emplace_back(key, values(1, 0));
  write_text(run + "/metrics.jsonl", jsonl_of(columns, steps));

  const PlotRun result = run_plot(dir, {run});
  INFO(result.output);
  REQUIRE(result.status.success());
  const std::string plots = run + "/plots/";
  for (const char* file : {"reward.svg", "rewards.svg", "ratio.svg", "advantages.svg", "response_length.svg",
                           "clip_ratio.svg", "prompt_length.svg"}) {
    CHECK_MESSAGE(fs::exists(plots + file), file);
    CHECK(result.output.find(std::string("skipped ") + file) == std::string::npos);
  }
  CHECK(result.output.find("skipped reward_<name>_<part>.svg") == std::string::npos);
  CHECK(result.output.find(" band (") == std::string::npos);  // every band had its edges

  SUBCASE("rewards: each reward/<name>, not the total's mean, std, fallbacks, timeouts, nor the parts") {
    const std::string svg = read_text(plots + "rewards.svg");
    check_well_formed(svg, "rewards.svg");
    CHECK(elements(svg, "path", "class=\"series\"").size() == 2);
    CHECK(svg.find("reward/timeouts") == std::string::npos);
    CHECK(path_points(series_d(svg, "reward/math")).size() == static_cast<size_t>(steps));
    CHECK(path_points(series_d(svg, "reward/length-v2")).size() == static_cast<size_t>(steps));
  }

  SUBCASE("the failure counters have a chart of their own") {
    const std::string svg = read_text(plots + "failures.svg");
    check_well_formed(svg, "failures.svg");
    CHECK(elements(svg, "path", "class=\"series\"").size() == 2);
    CHECK(path_points(series_d(svg, "reward/timeouts")).size() == static_cast<size_t>(steps));
    CHECK(path_points(series_d(svg, "reward/fallbacks")).size() == static_cast<size_t>(steps));
  }

  SUBCASE("one chart per reward part, its file name sanitised") {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(plots)) files.push_back(entry.path().filename().string());
    for (const std::string& file : files) {
      INFO(file);
      CHECK(file.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.") ==
            std::string::npos);
    }
    CHECK(std::count_if(files.begin(), files.end(), [](const std::string& f) { return f.rfind("reward_", 0) == 0; }) ==
          static_cast<long>(parts.size()));  // reward/x/y/z has none
    const std::string index = read_text(plots + "index.html");
    const size_t heading = index.find("<h2>Reward parts</h2>");
    CHECK(heading != std::string::npos);
    CHECK(heading < index.find("<img src=\"reward_math_correct.svg\""));
    for (const auto& [file, key] : parts) {
      INFO(file, " for ", key);
      REQUIRE(fs::exists(plots + file));
      const std::string svg = read_text(plots + file);
      check_well_formed(svg, file);
      CHECK(path_points(series_d(svg, key)).size() == static_cast<size_t>(steps));
      CHECK(elements(svg, "path", "class=\"series\"").size() == 1);
      CHECK(index.find("<img src=\"" + file + "\"") != std::string::npos);
    }
  }

  SUBCASE("response length: the mean with a band from length_min to length_max, drawn from 0") {
    const std::string svg = read_text(plots + "response_length.svg");
    check_well_formed(svg, "response_length.svg");
    const Area area = plot_area(svg);
    const double hi = *std::max_element(length_max.begin(), length_max.end());
    const std::vector<PathPoint> mean = path_points(series_d(svg, "response/length_mean"));
    REQUIRE(mean.size() == static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i) {
      CHECK(std::abs(mean[i].y - (area.bottom - (area.bottom - area.top) * length_mean[i] / hi)) < 0.01);
    }
    const auto [band_top, band_bottom] = band_extent(svg);
    const double lo = *std::min_element(length_min.begin(), length_min.end());
    CHECK(std::abs(band_top - area.top) < 0.01);
    CHECK(std::abs(band_bottom - (area.bottom - (area.bottom - area.top) * lo / hi)) < 0.01);
    CHECK(svg.find(">min to max</text>") != std::string::npos);
  }

  SUBCASE("advantages and ratio: the mean with a band spanning min to max") {
    for (const auto& [file, mean_key] : {std::pair<std::string, std::string>{"advantages.svg", "critic/advantages/mean"},
                                         std::pair<std::string, std::string>{"ratio.svg", "actor/ratio_mean"}}) {
      INFO(file);
      const std::string svg = read_text(plots + file);
      check_well_formed(svg, file);
      CHECK(path_points(series_d(svg, mean_key)).size() == static_cast<size_t>(steps));
      const Area area = plot_area(svg);
      const auto [band_top, band_bottom] = band_extent(svg);
      CHECK(std::abs(band_top - area.top) < 0.01);        // the largest max on the top edge
      CHECK(std::abs(band_bottom - area.bottom) < 0.01);  // the smallest min on the bottom one
    }
  }

  SUBCASE("clip ratio and prompt length: one series each, drawn from 0") {
    const std::string svg = read_text(plots + "clip_ratio.svg");
    check_well_formed(svg, "clip_ratio.svg");
    const Area area = plot_area(svg);
    const double hi = *std::max_element(clip.begin(), clip.end());
    const std::vector<PathPoint> points = path_points(series_d(svg, "response/clip_ratio"));
    REQUIRE(points.size() == static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i) CHECK(std::abs(points[i].y - (area.bottom - (area.bottom - area.top) * clip[i] / hi)) < 0.01);
    const std::string prompt = read_text(plots + "prompt_length.svg");
    check_well_formed(prompt, "prompt_length.svg");
    CHECK(path_points(series_d(prompt, "prompt/length_mean")).size() == static_cast<size_t>(steps));
  }
}

TEST_CASE("plot: the new charts are skipped and named without their metrics; a range chart draws what it has") {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  fs::create_directories(run);

  SUBCASE("none of them") {
    write_text(run + "/metrics.jsonl",
               "{\"step\":1,\"reward/mean\":0.5,\"reward/std\":0.1,\"reward/fallbacks\":0}\n"
               "{\"step\":2,\"reward/mean\":0.7,\"reward/std\":0.1,\"reward/fallbacks\":0}\n");
    const PlotRun result = run_plot(dir, {run});
    INFO(result.output);
    REQUIRE(result.status.success());
    for (const char* line : {
             "skipped rewards.svg: no finite reward/<name> metrics in metrics.jsonl",
             "skipped ratio.svg: no actor/ratio_mean in metrics.jsonl; no actor/ratio_min in metrics.jsonl; "
             "no actor/ratio_max in metrics.jsonl",
             "skipped advantages.svg: no critic/advantages/mean in metrics.jsonl",
             "skipped response_length.svg: no response/length_mean in metrics.jsonl",
             "skipped clip_ratio.svg: no response/clip_ratio in metrics.jsonl",
             "skipped prompt_length.svg: no prompt/length_mean in metrics.jsonl",
             "skipped reward_<name>_<part>.svg: no reward/<name>/<part> metrics in metrics.jsonl",
         }) {
      CHECK_MESSAGE(result.output.find(line) != std::string::npos, line);
    }
    for (const char* file : {"rewards.svg", "ratio.svg", "advantages.svg", "clip_ratio.svg", "prompt_length.svg"}) {
      CHECK_FALSE(fs::exists(run + "/plots/" + file));
    }
    CHECK(read_text(run + "/plots/index.html").find("<h2>Reward parts</h2>") == std::string::npos);
  }

  SUBCASE("a mean without its band, extremes without their mean, a part with no finite value") {
    write_text(run + "/metrics.jsonl",
               "{\"step\":1,\"response/length_mean\":10,\"actor/ratio_min\":0.9,\"actor/ratio_max\":1.2,"
               "\"reward/math/correct\":null}\n"
               "{\"step\":2,\"response/length_mean\":12,\"actor/ratio_min\":0.8,\"actor/ratio_max\":1.1,"
               "\"reward/math/correct\":null}\n");
    const PlotRun result = run_plot(dir, {run});
    INFO(result.output);
    REQUIRE(result.status.success());
    CHECK(result.output.find("skipped response_length.svg band (response/length_min to response/length_max): "
                             "no response/length_min in metrics.jsonl") != std::string::npos);
    const std::string length = read_text(run + "/plots/response_length.svg");
    CHECK(path_points(series_d(length, "response/length_mean")).size() == 2);
    CHECK(elements(length, "path", "class=\"band\"").empty());

    CHECK(result.output.find("skipped ratio.svg line (actor/ratio_mean): no actor/ratio_mean in metrics.jsonl") !=
          std::string::npos);
    const std::string ratio = read_text(run + "/plots/ratio.svg");
    CHECK(path_points(series_d(ratio, "actor/ratio_max")).size() == 2);
    CHECK(path_points(series_d(ratio, "actor/ratio_min")).size() == 2);

    CHECK(result.output.find("skipped reward_math_correct.svg: no finite reward/math/correct values") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(run + "/plots/reward_math_correct.svg"));
  }
}
