// What a config value may be. Each check knows how to describe what it allows, so
// errors read "expected a positive number, got "fast"" without per-field text.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tandem::config_check {

struct Number {  // a finite double in a range
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  std::string description;
  bool allows(double v) const {
    return std::isfinite(v) && (min_exclusive ? v > min : v >= min) && v <= max;
  }
};

struct Integer {
  int64_t min = std::numeric_limits<int64_t>::min();
  int64_t max = std::numeric_limits<int64_t>::max();
  std::string description;
  bool allows(int64_t v) const { return v >= min && v <= max; }
};

struct Choice {
  std::vector<std::string> allowed;
  bool allows(const std::string& v) const {
    for (const auto& a : allowed)
      if (a == v) return true;
    return false;
  }
};

struct Text {
  bool required = false;  // must be present and non-empty
};

// Any YAML mapping, kept as JSON object text ("{}" when absent): values a plugin or a
// Python function reads as they are (reward_kwargs). Scalars are typed as YAML's core
// schema reads them: true/false, null, integers, floats, else strings.
struct Mapping {};

// A list of strings (or one string, read as a one-element list).
struct TextList {};

inline Number positive() { return {0.0, std::numeric_limits<double>::infinity(), true, "a positive number"}; }
inline Number non_negative() { return {0.0, std::numeric_limits<double>::infinity(), false, "a number >= 0"}; }
inline Number between(double lo, double hi) {
  return {lo, hi, false, fmt::format("a number in [{}, {}]", lo, hi)};
}
inline Number above_up_to(double lo, double hi) {
  return {lo, hi, true, fmt::format("a number in ({}, {}]", lo, hi)};
}
// (lo, hi): both ends excluded (the upper one as its next double down, so `allows` stays one test).
inline Number strictly_between(double lo, double hi) {
  return {lo, std::nextafter(hi, lo), true, fmt::format("a number in ({}, {})", lo, hi)};
}
inline Integer at_least(int64_t lo) { return {lo, std::numeric_limits<int64_t>::max(), fmt::format("an integer >= {}", lo)}; }
inline Integer integer_between(int64_t lo, int64_t hi) { return {lo, hi, fmt::format("an integer in [{}, {}]", lo, hi)}; }
inline Integer any_integer() { return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), "an integer"}; }
inline Number any_number() { return {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), false, "a number"}; }
inline Choice one_of(std::vector<std::string> allowed) { return {std::move(allowed)}; }
inline Text text() { return {false}; }
inline Text required_text() { return {true}; }
inline Mapping mapping() { return {}; }
inline TextList text_list() { return {}; }

}  // namespace tandem::config_check
