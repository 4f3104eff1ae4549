#include "plugins/rewards.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace tandem {

namespace {

std::string trim(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

// The content of the last \boxed{...}, braces balanced.
std::optional<std::string> last_boxed(const std::string& text) {
  const size_t at = text.rfind("\\boxed{");
  if (at == std::string::npos) return std::nullopt;
  int depth = 0;
  for (size_t i = at + 6; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return trim(text.substr(at + 7, i - at - 7));
  }
  return std::nullopt;  // unclosed
}

// The last maximal run of number characters: digits with optional sign, '.', ',' and '/'.
std::optional<std::string> last_number(const std::string& text) {
  auto digit = [&](size_t i) { return std::isdigit(static_cast<unsigned char>(text[i])) != 0; };
  size_t end = text.size();
  while (end > 0 && !digit(end - 1)) --end;
  if (end == 0) return std::nullopt;
  size_t begin = end;
  while (begin > 0 && (digit(begin - 1) || ((text[begin - 1] == '.' || text[begin - 1] == ',' || text[begin - 1] == '/') &&
                                            begin >= 2 && digit(begin - 2)))) {
    --begin;
  }
  if (begin > 0 && text[begin - 1] == '-') --begin;
  return text.substr(begin, end - begin);
}

}  // namespace

std::optional<std::string> extract_math_answer(const std::string& response) {
  if (auto boxed = last_boxed(response)) return boxed;
  const size_t hashes = response.rfind("####");
  if (hashes != std::string::npos) {
    if (auto number = last_number(response.substr(hashes + 4))) return number;
  }
  return last_number(response);
}

std::optional<double> parse_math_number(const std::string& raw) {
  std::string text;
  for (char c : trim(raw)) {
    if (c != ',' && c != '$') text += c;
  }
  const size_t slash = text.find('/');
  if (slash != std::string::npos) {
    auto numerator = parse_math_number(text.substr(0, slash));
    auto denominator = parse_math_number(text.substr(slash + 1));
    if (!numerator || !denominator || *denominator == 0) return std::nullopt;
    return *numerator / *denominator;
  }
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

RewardResult math_answer_reward(const RewardInput& in) {
  auto expected_field = in.row.find("answer");
  if (expected_field == in.row.end()) throw std::runtime_error("math_answer: the dataset row has no \"answer\" field");
  const std::optional<double> expected = parse_math_number(expected_field->second);
  if (!expected) {
    throw std::runtime_error("math_answer: the row's answer \"" + expected_field->second + "\" is not a number");
  }
  const std::optional<std::string> answer = extract_math_answer(in.response);
  const std::optional<double> got = answer ? parse_math_number(*answer) : std::nullopt;
  const bool correct = got && std::abs(*got - *expected) <= 1e-6 * std::max(1.0, std::abs(*expected));
  return {correct ? 1.0 : 0.0, {{"found", answer ? 1.0 : 0.0}}};
}

}  // namespace tandem
