// Training prompts: rows of a JSONL file, a JSON array file or a built-in task, and the
// order they are served in.
//
// A row keeps every top-level field of its JSON object (string fields as they are, other
// values as JSON text), so a reward can read `answer` or anything else the file carries.
// The prompt is the `data.prompt_key` field: a string, or a list of chat messages
// ([{role, content}], the verl / OpenRLHF layout) that run_inputs renders with the chat
// template. The reference answer is found by `answer_key`, a dotted path into nested
// objects (verl's `reward_model.ground_truth`), and stored as the row's `answer` field.
//
// Parquet files are refused with the command that converts them: Debian 12 packages no
// Parquet reader for C++ (Apache Arrow's library is not in it).
//
// Built-in tasks (`builtin:<name>`), generated from a fixed seed so every run and test
// sees the same rows:
//   addition   "<a>+<b>=" with answer "<a+b>", operands 0..99
//   addition1  the same with operands 0..9 (a task a tiny policy learns in minutes)
//   tool_addition  "<a>+<b>" with operands 10..99 (2000 rows), and `trace`: a warm-up
//              response calling the `add` tool (configs/tool_addition.yaml)
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem {

using DataRow = std::map<std::string, std::string>;

struct Dataset {
  std::string source;  // the path or builtin: name, for messages
  std::vector<DataRow> rows;
  std::vector<int64_t> lines;  // JSONL: the file line of each row, for messages; otherwise empty
  // [row]: the prompt's chat messages when it is a message list (null for a string prompt).
  // Until they are rendered, rows[row][prompt_key] holds the list as JSON text.
  std::vector<nlohmann::ordered_json> prompt_messages;
  std::vector<nlohmann::ordered_json> objects;  // DatasetKeys::environment: [row] the row as read
  const std::string& prompt(size_t row) const;  // rows[row][prompt_key]; an Error naming the row when absent
  // Where a row is, for messages: "file:line", or "file row N" / "builtin:task row N" (N from 1).
  std::string where(size_t row) const;
  std::string prompt_key;
};

struct DatasetKeys {
  std::string prompt = "prompt";
  std::string answer = "answer";  // dotted path; found values are stored as the row's `answer`
  std::string response = "";      // sft.response_key: a dotted path's value is stored under the path itself
  // The rows go to an environment (environment.python): a row needs no prompt (reset()
  // makes it) and keeps its JSON object (Dataset::objects), types and all.
  bool environment = false;
};

// Reads `spec`: a .jsonl file (one object per line), a .json file (an array of objects),
// or builtin:<task>. Errors name the file and line (or row): not a JSON object, no prompt
// field, a prompt that is neither a string nor a message list, an empty file, a Parquet
// file (with the conversion to run). A row without the answer path keeps no `answer`.
Dataset load_dataset(const std::string& spec, const DatasetKeys& keys);

// The value at a dotted path ("reward_model.ground_truth") in a JSON object; null when a
// step is missing or not an object.
const nlohmann::ordered_json* find_dotted(const nlohmann::ordered_json& object, const std::string& path);

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
