// Small text helpers shared by error messages.
#pragma once

#include <string>
#include <vector>

namespace tandem {

// Levenshtein distance (insert, delete, substitute each cost 1).
size_t edit_distance(const std::string& a, const std::string& b);

// The closest candidate when it is close enough to be a plausible typo, else "".
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// "a, b or c"
std::string join_choices(const std::vector<std::string>& choices);

// Splits on a separator: "a.b.c" -> {"a", "b", "c"}.
std::vector<std::string> split(const std::string& text, char separator);

// Quotes text for a message, escaping control characters; long text is shortened.
std::string quoted(const std::string& text, size_t max_length = 80);

// `text` as one shell word: in single quotes (nothing inside is expanded), or as it is when
// it holds only characters the shell takes literally and `always` is false.
std::string shell_quote(const std::string& text, bool always = false);

}  // namespace tandem
