// Training prompts: rows of a JSONL file or of a built-in task, and the order they are
// served in.
//
// A row keeps every field of its JSON object (string fields as they are, other values as
// JSON text), so a reward can read `answer` or anything else the file carries. The
// prompt is the `data.prompt_key` field.
//
// Built-in tasks (`builtin:<name>`), generated from a fixed seed so every run and test
// sees the same rows:
//   addition   "<a>+<b>=" with answer "<a+b>", operands 0..99
//   addition1  the same with operands 0..9 (a task a tiny policy learns in minutes)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem {

using DataRow = std::map<std::string, std::string>;

struct Dataset {
  std::string source;  // the path or builtin: name, for messages
  std::vector<DataRow> rows;
  std::vector<int64_t> lines;  // JSONL: the file line of each row, for messages; built-in: empty
  const std::string& prompt(size_t row) const;  // rows[row].at(prompt_key)
  // Where a row is, for messages: "file:line", or "builtin:task row N" (N from 1).
  std::string where(size_t row) const;
  std::string prompt_key;
};

// Reads `spec` (a .jsonl path or builtin:<task>). Errors name the file and line: not a
// JSON object, no `prompt_key` field, an empty file.
Dataset load_dataset(const std::string& spec, const std::string& prompt_key);

std::vector<std::string> builtin_task_names();

// The order prompts are served in: epoch after epoch over the rows, each epoch a
// permutation drawn from (seed, epoch) when shuffled. The position is two integers, so
// a resumed run continues exactly where it stopped.
class PromptOrder {
 public:
  PromptOrder(size_t rows, uint64_t seed, bool shuffle);

  // The next `count` row indices (crossing into the next epoch when one ends).
  std::vector<size_t> next(size_t count);

  struct Position {
    int64_t epoch = 0;
    int64_t index = 0;  // within the epoch's permutation
  };
  Position position() const { return position_; }
  void restore(Position position);

 private:
  void build_permutation();

  size_t rows_;
  uint64_t seed_;
  bool shuffle_;
  Position position_;
  std::vector<size_t> permutation_;
};

}  // namespace tandem
