// Built-in reward functions, registered under their names in reward_registry.h:
//
//   math_answer  1 when the response's answer equals the row's `answer` numerically, else
//                0. The response's answer is the last \boxed{...}, else the text after
//                the last "####", else the last number in the response. Numbers may
//                carry a sign, a decimal point and thousands commas; "3/4" style
//                fractions are compared as their value. Sub-score: found (an answer
//                was extracted).
#pragma once

#include <tandem/reward.h>

#include <optional>
#include <string>

namespace tandem {

RewardResult math_answer_reward(const RewardInput& in);

// The answer math_answer compares (exposed for tests): nullopt when there is none.
std::optional<std::string> extract_math_answer(const std::string& response);
// The value of a number as math_answer reads it: "1,234.5", "-3", "3/4"; nullopt if not one.
std::optional<double> parse_math_number(const std::string& text);

}  // namespace tandem
