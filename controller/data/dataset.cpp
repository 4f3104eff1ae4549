#include "controller/data/dataset.h"

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>

namespace tandem {

namespace {

// A dataset is read whole into memory; past this it should be split or streamed.
constexpr uint64_t kMaxDatasetBytes = 8ull << 30;
// Real rows nest a few levels (messages, tool calls); a deeper one is refused before any
// recursive walk of it (validation, dump) could overflow the stack.
constexpr size_t kMaxRowNesting = 64;

std::vector<DataRow> addition_rows(int64_t max_operand) {
  std::vector<DataRow> rows;
  for (int64_t a = 0; a <= max_operand; ++a) {
    for (int64_t b = 0; b <= max_operand; ++b) {
      rows.push_back({{"prompt", std::to_string(a) + "+" + std::to_string(b) + "="}, {"answer", std::to_string(a + b)}});
    }
  }
  return rows;
}

// Two-digit sums for a policy with a calculator (configs/tool_addition.yaml): 2000 rows
// of a seeded draw. `trace` is the warm-up's gold response: the call, the tool's answer as
// configs/tool_addition/chat_template.jinja frames it, and the sum.
std::vector<DataRow> tool_addition_rows() {
  std::mt19937_64 rng(20261128);
  std::uniform_int_distribution<int64_t> operand(10, 99);
  std::vector<DataRow> rows;
  for (int i = 0; i < 2000; ++i) {
    const int64_t a = operand(rng), b = operand(rng);
    const std::string sum = std::to_string(a + b);
    const std::string trace = fmt::format(
        "<tool_call>{{\"name\":\"add\",\"arguments\":{{\"a\":{},\"b\":{}}}}}</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n<|im_start|>assistant\n{}",
        a, b, sum, sum);
    rows.push_back({{"prompt", fmt::format("{}+{}", a, b)}, {"answer", sum}, {"trace", trace}});
  }
  return rows;
}

std::vector<DataRow> builtin_rows(const std::string& name) {
  if (name == "addition") return addition_rows(99);
  if (name == "addition1") return addition_rows(9);
  if (name == "tool_addition") return tool_addition_rows();
  const auto known = builtin_task_names();
  const std::string guess = closest_match(name, known);
  throw Error(fmt::format("data.train: unknown built-in task \"builtin:{}\"{}; built-in: {}", name,
                          guess.empty() ? "" : fmt::format(" (did you mean builtin:{}?)", guess),
                          join_choices(known)));
}

// The objects of a .jsonl file (one per non-blank line) with their line numbers.
std::vector<nlohmann::ordered_json> jsonl_objects(const std::string& path, const std::string& text,
                                          std::vector<int64_t>& line_numbers) {
  std::vector<nlohmann::ordered_json> objects;
  std::istringstream lines(text);
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    if (json_nesting_depth(line) > kMaxRowNesting) {
      throw Error(fmt::format("{}:{}: the row nests arrays and objects more than {} deep", path, number,
                              kMaxRowNesting));
    }
    nlohmann::ordered_json object;
    try {
      object = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::ordered_json::parse_error& e) {
      // The library's text counts lines and columns within this one line ("line 1"):
      // keep only its reason, after our file:line:column.
      const std::string what = e.what();
      const size_t reason = what.find(": ", what.find("parse error"));
      throw Error(fmt::format("{}:{}:{}: not valid JSON: {}", path, number, e.byte,
                              reason == std::string::npos ? what : what.substr(reason + 2)));
    } catch (const nlohmann::ordered_json::exception& e) {
      throw Error(fmt::format("{}:{}: not valid JSON: {}", path, number, e.what()));
    }
    if (!object.is_object()) throw Error(fmt::format("{}:{}: expected a JSON object, got {}", path, number, line));
    objects.push_back(std::move(object));
    line_numbers.push_back(number);
  }
  return objects;
}

// The objects of a .json file holding one array of them.
std::vector<nlohmann::ordered_json> json_array_objects(const std::string& path, const std::string& text) {
  if (json_nesting_depth(text) > kMaxRowNesting + 1) {
    throw Error(fmt::format("{}: a row nests arrays and objects more than {} deep", path, kMaxRowNesting));
  }
  nlohmann::ordered_json array;
  try {
    array = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  if (!array.is_array()) {
    throw Error(fmt::format("{}: a .json dataset must be an array of objects, got a {} (one object per line is a "
                            ".jsonl file)",
                            path, array.type_name()));
  }
  std::vector<nlohmann::ordered_json> objects;
  for (size_t i = 0; i < array.size(); ++i) {
    if (!array[i].is_object()) {
      throw Error(fmt::format("{} row {}: expected a JSON object, got {}", path, i + 1, array[i].dump()));
    }
    objects.push_back(std::move(array[i]));
  }
  return objects;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<nlohmann::ordered_json> file_objects(const std::string& path, std::vector<int64_t>& line_numbers) {
  if (ends_with(path, ".parquet")) {
    throw Error(fmt::format(
        "data.train: {} is Parquet, which tandem cannot read (Debian 12 has no Parquet library for C++); convert it "
        "to JSONL first, e.g. with pandas and pyarrow: python3 -c \"import pandas; "
        "pandas.read_parquet('{}').to_json('{}.jsonl', orient='records', lines=True, force_ascii=False)\"",
        path, path, path.substr(0, path.size() - 8)));
  }
  std::string text;
  try {
    text = read_input_file(path, kMaxDatasetBytes);
  } catch (const Error& e) {
    throw Error(fmt::format("data.train: cannot read {}: {}", path, e.what()));
  }
  if (ends_with(path, ".json")) return json_array_objects(path, text);
  return jsonl_objects(path, text, line_numbers);
}

// A prompt message list: [{role: string, content: string}, ...], at least one.
bool is_message_list(const nlohmann::ordered_json& value) {
  if (!value.is_array() || value.empty()) return false;
  for (const nlohmann::ordered_json& m : value) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> builtin_task_names() { return {"addition", "addition1", "tool_addition"}; }

const std::string& Dataset::prompt(size_t row) const {
  auto it = rows.at(row).find(prompt_key);
  if (it == rows.at(row).end()) throw Error(fmt::format("{}: no \"{}\" field (data.prompt_key)", where(row), prompt_key));
  return it->second;
}

std::string Dataset::where(size_t row) const {
  return lines.empty() ? fmt::format("{} row {}", source, row + 1) : fmt::format("{}:{}", source, lines.at(row));
}

const nlohmann::ordered_json* find_dotted(const nlohmann::ordered_json& object, const std::string& path) {
  const nlohmann::ordered_json* at = &object;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string step = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!at->is_object()) return nullptr;
    auto it = at->find(step);
    if (it == at->end()) return nullptr;
    at = &*it;
    if (dot == std::string::npos) return at;
    begin = dot + 1;
  }
}

Dataset load_dataset(const std::string& spec, const DatasetKeys& keys) {
  Dataset data;
  data.source = spec;
  data.prompt_key = keys.prompt;
  const std::string prefix = "builtin:";
  if (spec.rfind(prefix, 0) == 0) {
    data.rows = builtin_rows(spec.substr(prefix.size()));
    for (const std::string& key : {keys.prompt, keys.answer}) {
      if (!data.rows.front().count(key)) {
        throw Error(fmt::format("{}: \"{}\": {} rows have the fields prompt and answer (and trace) only",
                                key == keys.prompt ? "data.prompt_key" : "data.answer_key", key, spec));
      }
    }
    data.prompt_messages.assign(data.rows.size(), nullptr);
    if (keys.environment) {
      for (const DataRow& row : data.rows) data.objects.push_back(nlohmann::ordered_json(row));
    }
    return data;
  }
  const std::vector<nlohmann::ordered_json> objects = file_objects(spec, data.lines);
  if (objects.empty()) throw Error(fmt::format("data.train: {} has no rows", spec));
  for (size_t i = 0; i < objects.size(); ++i) {
    const nlohmann::ordered_json& object = objects[i];
    DataRow row;
    for (const auto& [key, value] : object.items()) row[key] = value.is_string() ? value.get<std::string>() : value.dump();
    data.rows.push_back(std::move(row));
    if (keys.environment) data.objects.push_back(object);
    auto prompt = object.find(keys.prompt);
    if (prompt == object.end() && keys.environment) {
      data.prompt_messages.emplace_back(nullptr);
    } else if (prompt == object.end()) {
      throw Error(fmt::format("{}: no \"{}\" field (data.prompt_key)", data.where(i), keys.prompt));
    } else if (prompt->is_string()) {
      data.prompt_messages.emplace_back(nullptr);
    } else if (is_message_list(*prompt)) {
      data.prompt_messages.push_back(*prompt);
    } else {
      throw Error(fmt::format("{}: the prompt (field \"{}\") must be a string or a list of chat messages "
                              "[{{\"role\": ..., \"content\": ...}}], got {}",
                              data.where(i), keys.prompt, prompt->dump().substr(0, 120)));
    }
    // A dotted sft.response_key is found like answer_key and stored under its own name.
    if (!keys.response.empty() && keys.response.find('.') != std::string::npos) {
      if (const nlohmann::ordered_json* response = find_dotted(object, keys.response)) {
        data.rows.back()[keys.response] = response->is_string() ? response->get<std::string>() : response->dump();
      }
    }
    if (keys.answer != "answer" || keys.answer.find('.') != std::string::npos) {
      if (const nlohmann::ordered_json* answer = find_dotted(object, keys.answer)) {
        data.rows.back()["answer"] = answer->is_string() ? answer->get<std::string>() : answer->dump();
      } else {
        data.rows.back().erase("answer");  // rewards must not read a field the config did not point at
      }
    }
  }
  return data;
}

PromptOrder::PromptOrder(size_t rows, uint64_t seed, bool shuffle) : rows_(rows), seed_(seed), shuffle_(shuffle) {
  TANDEM_CHECK(rows > 0, "PromptOrder over no rows");
  build_permutation();
}

void PromptOrder::build_permutation() {
  permutation_.resize(rows_);
  for (size_t i = 0; i < rows_; ++i) permutation_[i] = i;
  if (!shuffle_) return;
  // Fisher-Yates with our own draws: std::shuffle's algorithm is not specified, and a
  // resumed run on another standard library must see the same order.
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(position_.epoch));
  for (size_t i = rows_ - 1; i > 0; --i) std::swap(permutation_[i], permutation_[rng() % (i + 1)]);
}

std::vector<size_t> PromptOrder::next(size_t count) {
  std::vector<size_t> out;
  while (out.size() < count) {
    if (position_.index == static_cast<int64_t>(rows_)) {
      ++position_.epoch;
      position_.index = 0;
      build_permutation();
    }
    out.push_back(permutation_[static_cast<size_t>(position_.index++)]);
  }
  return out;
}

void PromptOrder::restore(Position position) {
  TANDEM_CHECK(position.epoch >= 0 && position.index >= 0 && position.index <= static_cast<int64_t>(rows_),
               "prompt order position (epoch {}, index {}) is outside a dataset of {} rows", position.epoch,
               position.index, rows_);
  position_ = position;
  build_permutation();
}

}  // namespace tandem
