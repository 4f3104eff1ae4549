#include "rewards/python/worker.h"

#include "python/embedded_python.h"
#include "python/worker_support.h"

#include <nlohmann/json.hpp>
#include <pybind11/embed.h>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace py = pybind11;

namespace tandem::python {

namespace {

// A number in Python's sense (bool, int, float, numpy scalars), not a string.
bool is_number(const py::handle& value) {
  return !py::isinstance<py::str>(value) && !py::isinstance<py::bytes>(value) && PyNumber_Check(value.ptr()) &&
         py::hasattr(value, "__float__");
}

// One call's result as a protocol line.
nlohmann::json to_result(const py::handle& value, const std::string& function) {
  if (is_number(value)) return {{"score", value.cast<py::float_>().cast<double>()}, {"parts", nlohmann::json::object()}};
  if (py::isinstance<py::dict>(value)) {
    py::dict dict = py::reinterpret_borrow<py::dict>(value);
    if (!dict.contains("score")) {
      return {{"error", fmt::format("{} returned a dict without a \"score\" entry (keys: {})", function,
                                    py::str(py::list(dict.attr("keys")())).cast<std::string>())}};
    }
    py::handle score = dict["score"];
    if (!is_number(score)) {
      return {{"error", fmt::format("{} returned \"score\": {} (a {}); expected a number", function,
                                    py::repr(score).cast<std::string>(), type_name(score))}};
    }
    nlohmann::json parts = nlohmann::json::object();
    for (const auto& [key, part] : dict) {
      const std::string name = py::str(key);
      if (name != "score" && is_number(part)) parts[name] = part.cast<py::float_>().cast<double>();
    }
    return {{"score", score.cast<py::float_>().cast<double>()}, {"parts", parts}};
  }
  return {{"error", fmt::format("{} returned {} (a {}); expected a number or a dict with \"score\"", function,
                                py::repr(value).cast<std::string>().substr(0, 200), type_name(value))}};
}

// The names verl passes, one call or a batch of calls.
using ArgumentNames = std::array<const char*, 4>;
const ArgumentNames kCallNames = {"data_source", "solution_str", "ground_truth", "extra_info"};
const ArgumentNames kBatchNames = {"data_sources", "solution_strs", "ground_truths", "extra_infos"};

// The keyword arguments of one call: verl's four names, then reward_kwargs.
py::dict call_arguments(const nlohmann::json& call, const py::dict& reward_kwargs) {
  py::dict arguments;
  arguments["data_source"] = py::str(call.at("data_source").get<std::string>());
  arguments["solution_str"] = py::str(call.at("solution_str").get<std::string>());
  arguments["ground_truth"] = from_json(call.at("ground_truth"));
  arguments["extra_info"] = from_json(call.at("extra_info"));
  for (const auto& [name, value] : reward_kwargs) arguments[name] = value;
  return arguments;
}

void answer_one_by_one(FILE* out, const py::object& fn, const nlohmann::json& calls, const std::string& function,
                       const py::dict& reward_kwargs) {
  for (const nlohmann::json& call : calls) {
    nlohmann::json result;
    try {
      py::object value = fn(**call_arguments(call, reward_kwargs));
      result = to_result(value, function);
    } catch (const py::error_already_set& e) {
      result = {{"error", describe(e)}};
    }
    send(out, result);
  }
}

void answer_batched(FILE* out, const py::object& fn, const nlohmann::json& calls, const std::string& function,
                    const py::dict& reward_kwargs) {
  py::list data_sources, solution_strs, ground_truths, extra_infos;
  for (const nlohmann::json& call : calls) {
    data_sources.append(call.at("data_source").get<std::string>());
    solution_strs.append(call.at("solution_str").get<std::string>());
    ground_truths.append(from_json(call.at("ground_truth")));
    extra_infos.append(from_json(call.at("extra_info")));
  }
  std::vector<nlohmann::json> results;
  try {
    py::dict arguments;
    arguments["data_sources"] = data_sources;
    arguments["solution_strs"] = solution_strs;
    arguments["ground_truths"] = ground_truths;
    arguments["extra_infos"] = extra_infos;
    for (const auto& [name, value] : reward_kwargs) arguments[name] = value;
    py::object values = fn(**arguments);
    if (!py::isinstance<py::sequence>(values) || py::isinstance<py::str>(values) ||
        py::len(values) != calls.size()) {
      const std::string what = py::isinstance<py::sequence>(values)
                                   ? fmt::format("{} values", py::len(values))
                                   : fmt::format("a {}", type_name(values));
      const std::string error = fmt::format("{} (batched) returned {} for {} calls; expected a list with one score "
                                            "per call",
                                            function, what, calls.size());
      results.assign(calls.size(), {{"error", error}});
    } else {
      for (const py::handle value : values) results.push_back(to_result(value, function));
    }
  } catch (const py::error_already_set& e) {
    results.assign(calls.size(), {{"error", describe(e)}});
  }
  for (const nlohmann::json& result : results) send(out, result);
}

// Empty when `fn` can be called as verl calls it (or has no signature to check, as some
// C functions); else what is wrong, naming the parameter.
std::string check_signature(const py::object& fn, const RewardWorkerOptions& options, const py::dict& reward_kwargs) {
  // First, whatever the function: a reward_kwargs entry would replace one of verl's arguments.
  for (const ArgumentNames& names : {kCallNames, kBatchNames}) {
    for (const char* name : names) {
      if (reward_kwargs.contains(name)) return fmt::format("reward_kwargs names {}, which tandem passes itself", name);
    }
  }
  py::object signature;
  try {
    signature = py::module_::import("inspect").attr("signature")(fn);
  } catch (const py::error_already_set&) {
    return "";  // a builtin without introspection: the first call will tell
  }
  const auto& names = options.batched ? kBatchNames : kCallNames;
  py::dict arguments;
  std::string call;
  for (const char* name : names) {
    arguments[name] = py::none();
    call += fmt::format("{}{}=...", call.empty() ? "" : ", ", name);
  }
  for (const auto& [name, value] : reward_kwargs) {
    arguments[name] = value;
    call += fmt::format(", {}={}", py::str(name).cast<std::string>(), py::repr(value).cast<std::string>());
  }
  try {
    signature.attr("bind")(**arguments);
  } catch (const py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    return fmt::format("{}{} cannot be called as tandem (like verl) calls it, by keyword: {}({}): {}",
                       options.function, py::str(signature).cast<std::string>(), options.function, call,
                       py::str(e.value()).cast<std::string>());
  }
  return "";
}

}  // namespace

int run_reward_worker(const RewardWorkerOptions& options) {
  const std::string& file = options.file;
  const std::string& function = options.function;
  FILE* out = begin_worker();
  if (!out) return 1;
  py::gil_scoped_acquire gil;
  py::object fn;
  py::dict reward_kwargs;
  const nlohmann::json kwargs = nlohmann::json::parse(options.kwargs_json, nullptr, false);
  if (!kwargs.is_object()) {
    send(out, {{"error", fmt::format("--kwargs must be a JSON object, got {}", options.kwargs_json.substr(0, 200))}});
    return 1;
  }
  try {
    reward_kwargs = py::reinterpret_borrow<py::dict>(from_json(kwargs));
    ImportedFunction imported = import_function(file, function, options.search_path, "tandem_reward_", "rewards");
    if (!imported.error.empty()) {
      send(out, {{"error", imported.error}});
      return 1;
    }
    fn = imported.fn;
  } catch (const py::error_already_set& e) {
    send(out, {{"error", fmt::format("{}: reading reward_kwargs failed:\n{}", file, describe(e))}});
    return 1;
  }
  try {
    if (const std::string problem = check_signature(fn, options, reward_kwargs); !problem.empty()) {
      send(out, {{"error", fmt::format("{}: {}", file, problem)}});
      return 1;
    }
  } catch (const py::error_already_set& e) {
    send(out, {{"error", fmt::format("{}: checking {}'s signature failed:\n{}", file, function, describe(e))}});
    return 1;
  }
  send(out, {{"ready", true}});

  std::string line;
  while (read_request(line)) {
    nlohmann::json request;
    try {
      request = nlohmann::json::parse(line);
      if (request.contains("log")) {
        redirect_output(request["log"].get<std::string>());
        continue;
      }
      const nlohmann::json& calls = request.at("calls");
      if (options.batched) {
        answer_batched(out, fn, calls, function, reward_kwargs);
      } else {
        answer_one_by_one(out, fn, calls, function, reward_kwargs);
      }
    } catch (const nlohmann::json::exception& e) {
      std::fprintf(stderr, "reward-worker: bad request line: %s\n", e.what());
      return 1;
    }
  }
  return 0;
}

}  // namespace tandem::python
