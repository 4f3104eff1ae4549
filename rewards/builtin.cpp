#include "rewards/builtin.h"

#include "core/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <memory>
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

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return fmt::format("PCRE2 error {}", code);
  return reinterpret_cast<const char*>(buffer);
}

// Backtracking steps one match may take (PCRE2's own default, stated here so it is a known
// bound): a pattern like (a+)+b on a long run of a's fails in milliseconds, not hours.
constexpr uint32_t kFormatMatchLimit = 10'000'000;

// A compiled pattern. Matching only reads `code` and `context`, so one instance serves
// every thread (reward functions are called concurrently); match data is per call.
class FormatPattern {
 public:
  explicit FormatPattern(const std::string& pattern) : pattern_(pattern) {
    if (pattern.empty()) {
      throw Error("the format reward needs a non-empty pattern (the regex a whole response must match)");
    }
    int error = 0;
    PCRE2_SIZE offset = 0;
    // Anchored at both ends: the whole response must match. UTF-8 aware, and responses
    // that are not valid UTF-8 (a policy can emit any bytes) are matched, not rejected.
    const uint32_t options = PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_DOLLAR_ENDONLY | PCRE2_UTF |
                             PCRE2_MATCH_INVALID_UTF;
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset,
                              nullptr));
    if (!code_) {
      throw Error(fmt::format("invalid regex \"{}\": {} (at offset {})", pattern, pcre2_message(error), offset));
    }
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // optional: without JIT pcre2_match interprets
    context_.reset(pcre2_match_context_create(nullptr));
    TANDEM_CHECK(context_ != nullptr, "format reward: out of memory creating a PCRE2 match context");
    pcre2_set_match_limit(context_.get(), kFormatMatchLimit);
  }

  bool matches(const std::string& text) const {
    std::unique_ptr<pcre2_match_data, MatchDataFree> match(pcre2_match_data_create_from_pattern(code_.get(), nullptr));
    TANDEM_CHECK(match != nullptr, "format reward: out of memory creating PCRE2 match data");
    auto run = [&](uint32_t options) {
      return pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, options, match.get(),
                         context_.get());
    };
    int rc = run(0);
    // The JIT's small fixed stack ran out (deep nesting): the interpreter keeps its
    // backtracking state on the heap.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = run(PCRE2_NO_JIT);
    if (rc >= 0) return true;
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    throw Error(fmt::format("format: matching the pattern \"{}\" against a response of {} bytes failed: {}", pattern_,
                            text.size(), pcre2_message(rc)));
  }

 private:
  struct CodeFree {
    void operator()(pcre2_code* code) const { pcre2_code_free(code); }
  };
  struct ContextFree {
    void operator()(pcre2_match_context* context) const { pcre2_match_context_free(context); }
  };
  struct MatchDataFree {
    void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
  };
  std::string pattern_;
  std::unique_ptr<pcre2_code, CodeFree> code_;
  std::unique_ptr<pcre2_match_context, ContextFree> context_;
};

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
  // `correct` repeats the score as a part: parts are logged unweighted, so a weight-0
  // math_answer next to another reward (a reward model) still reports true accuracy.
  return {correct ? 1.0 : 0.0, {{"found", answer ? 1.0 : 0.0}, {"correct", correct ? 1.0 : 0.0}}};
}

RewardFn make_format_reward(const std::string& pattern) {
  auto compiled = std::make_shared<const FormatPattern>(pattern);
  return [compiled](const RewardInput& in) -> RewardResult { return {compiled->matches(in.response) ? 1.0 : 0.0, {}}; };
}

double length_penalty(int64_t length, int64_t max_length) {
  TANDEM_CHECK(max_length > 0, "length_penalty: max_length must be positive, got {}", max_length);
  if (length <= max_length) return 0.0;
  return std::max(-1.0, -static_cast<double>(length - max_length) / static_cast<double>(max_length));
}

RewardFn make_length_penalty_reward(int64_t max_length) {
  if (max_length < 1) {
    throw Error(fmt::format("the length_penalty reward needs max_length >= 1 (tokens before the penalty starts), got {}",
                            max_length));
  }
  return [max_length](const RewardInput& in) -> RewardResult {
    const auto length = static_cast<int64_t>(in.response_ids.size());
    return {length_penalty(length, max_length), {{"over", length > max_length ? 1.0 : 0.0}}};
  };
}

}  // namespace tandem
