// Built-in reward functions, registered under their names in reward_registry.h:
//
//   math_answer  1 when the response's answer equals the row's `answer` numerically, else
//                0. The response's answer is the last \boxed{...}, else the text after
//                the last "####", else the last number in the response. Numbers may
//                carry a sign, a decimal point and thousands commas; "3/4" style
//                fractions are compared as their value. Sub-scores: found (an answer
//                was extracted) and correct (the score again, unweighted, for a
//                math_answer kept at weight 0 as a monitor).
//   format       1 when the whole response matches the config's `pattern`, else 0. The
//                pattern is a PCRE2 regular expression (Perl/ECMAScript syntax: classes,
//                groups, alternation, quantifiers, lookarounds), UTF-8 aware, matched
//                against the entire response as if written ^(?:pattern)$ ("." does not match
//                a newline unless the pattern says (?s)). A match that runs past PCRE2's
//                backtracking limit throws (the sample's on_error policy decides) instead
//                of stalling the step.
//   length_penalty  with L = the response's token count (response_ids, an end-of-sequence
//                token included) and M = the config's `max_length`:
//                    score = 0                        when L <= M
//                    score = max(-1, -(L - M) / M)    when L >  M
//                i.e. 0 up to M tokens, then linearly down to -1 at 2M, -1 beyond.
//                Sub-score: over (1 when L > M), so the share of overlong responses shows.
#pragma once

#include <tandem/reward.h>

#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

RewardResult math_answer_reward(const RewardInput& in);

// The answer math_answer compares (exposed for tests): nullopt when there is none.
std::optional<std::string> extract_math_answer(const std::string& response);
// The value of a number as math_answer reads it: "1,234.5", "-3", "3/4"; nullopt if not one.
std::optional<double> parse_math_number(const std::string& text);

// The format reward for `pattern`. An empty pattern or one that does not compile is an
// Error giving PCRE2's message and the offset: `invalid regex "(ab": missing closing
// parenthesis (at offset 3)`.
RewardFn make_format_reward(const std::string& pattern);

// The length_penalty formula above; max_length must be positive.
double length_penalty(int64_t length, int64_t max_length);
// The length_penalty reward; a max_length below 1 is an Error.
RewardFn make_length_penalty_reward(int64_t max_length);

}  // namespace tandem
