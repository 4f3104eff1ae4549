// Small text helpers shared by error messages.
#pragma once

#include <string>
#include <string_view>
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

// A message as it can be printed whole: control characters other than newline and tab
// (a NUL in a key would end a C string there) written as \xNN.
std::string printable_message(const std::string& text);

// How deeply arrays and objects nest in JSON text (0 for a scalar), counted without parsing
// (brackets inside strings are skipped), so that a hostile document can be refused before a
// recursive walk of it overflows the stack.
size_t json_nesting_depth(std::string_view json_text);

// `text` as one shell word: in single quotes (nothing inside is expanded), or as it is when
// it holds only characters the shell takes literally and `always` is false.
std::string shell_quote(const std::string& text, bool always = false);

}  // namespace tandem
