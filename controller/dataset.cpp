#include "controller/dataset.h"

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

std::vector<DataRow> addition_rows(int64_t max_operand) {
  std::vector<DataRow> rows;
  for (int64_t a = 0; a <= max_operand; ++a) {
    for (int64_t b = 0; b <= max_operand; ++b) {
      rows.push_back({{"prompt", std::to_string(a) + "+" + std::to_string(b) + "="}, {"answer", std::to_string(a + b)}});
    }
  }
  return rows;
}

std::vector<DataRow> builtin_rows(const std::string& name) {
  if (name == "addition") return addition_rows(99);
  if (name == "addition1") return addition_rows(9);
  const auto known = builtin_task_names();
  const std::string guess = closest_match(name, known);
  throw Error(fmt::format("data.train: unknown built-in task \"builtin:{}\"{}; built-in: {}", name,
                          guess.empty() ? "" : fmt::format(" (did you mean builtin:{}?)", guess),
                          join_choices(known)));
}

std::vector<DataRow> jsonl_rows(const std::string& path, std::vector<int64_t>& line_numbers) {
  std::optional<std::string> text = read_file(path);
  if (!text) throw Error(fmt::format("data.train: cannot read {}: {}", path, std::strerror(errno)));
  std::vector<DataRow> rows;
  std::istringstream lines(*text);
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("{}:{}: not valid JSON: {}", path, number, e.what()));
    }
    if (!object.is_object()) throw Error(fmt::format("{}:{}: expected a JSON object, got {}", path, number, line));
    DataRow row;
    for (const auto& [key, value] : object.items()) row[key] = value.is_string() ? value.get<std::string>() : value.dump();
    rows.push_back(std::move(row));
    line_numbers.push_back(number);
  }
  return rows;
}

}  // namespace

std::vector<std::string> builtin_task_names() { return {"addition", "addition1"}; }

const std::string& Dataset::prompt(size_t row) const { return rows.at(row).at(prompt_key); }

std::string Dataset::where(size_t row) const {
  return lines.empty() ? fmt::format("{} row {}", source, row + 1) : fmt::format("{}:{}", source, lines[row]);
}

Dataset load_dataset(const std::string& spec, const std::string& prompt_key) {
  Dataset data;
  data.source = spec;
  data.prompt_key = prompt_key;
  const std::string prefix = "builtin:";
  data.rows = spec.rfind(prefix, 0) == 0 ? builtin_rows(spec.substr(prefix.size())) : jsonl_rows(spec, data.lines);
  if (data.rows.empty()) throw Error(fmt::format("data.train: {} has no rows", spec));
  for (size_t i = 0; i < data.rows.size(); ++i) {
    if (data.rows[i].count(prompt_key)) continue;
    throw Error(fmt::format("{}: no \"{}\" field (data.prompt_key)", data.where(i), prompt_key));
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
