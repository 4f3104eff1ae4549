// Python functions as tools (agent/python_tool.h): `tandem tool-worker` processes read
// the schema off the signature and docstring, calls run in parallel by keyword, errors
// the model reads (bad arguments, tracebacks), a call past its timeout kills and
// replaces its worker, a worker that dies is ToolUnavailable and is replaced.
#include "agent/python_tool.h"
#include "core/error.h"
#include "core/files.h"

#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <thread>

using namespace tandem;

namespace {

constexpr const char* kTools = R"PY(
import os, time

def calculator(expression: str, digits: int = 6):
    """Evaluates an arithmetic expression.

    Args:
        expression: the expression, like "12*(3+4)"
        digits (int): digits after the point
    """
    return round(eval(expression, {"__builtins__": {}}), digits)

def stats(values: list):
    """Sum and count."""
    return {"sum": sum(values), "count": len(values)}

def nap(seconds: float):
    time.sleep(seconds)
    return "awake after %s s" % seconds

def die():
    os._exit(3)
)PY";

PythonFunctionToolOptions options(const std::string& file, const std::string& function, double timeout_s = 10) {
  PythonFunctionToolOptions o;
  o.file = file;
  o.function = function;
  o.workers = 2;
  o.timeout_s = timeout_s;
  o.tandem_binary = TANDEM_BINARY;
  return o;
}

}  // namespace

TEST_CASE("python tool: schema from the signature and docstring; calls by keyword; errors the model reads") {
  TempDir dir;
  const std::string file = dir.path() + "/tools.py";
  std::ofstream(file) << kTools;
  std::shared_ptr<Tool> calc = make_python_function_tool(options(file, "calculator"));
  CHECK(calc->name() == "calculator");
  const nlohmann::ordered_json schema = calc->schema();
  CHECK(schema.begin().key() == "type");  // the order chat templates print, as transformers makes it
  CHECK(schema["function"]["description"] == "Evaluates an arithmetic expression.");
  const auto& parameters = schema["function"]["parameters"];
  CHECK(parameters["properties"]["expression"]["type"] == "string");
  CHECK(parameters["properties"]["expression"]["description"] == "the expression, like \"12*(3+4)\"");
  CHECK(parameters["properties"]["digits"]["type"] == "integer");
  CHECK(parameters["required"] == nlohmann::ordered_json::array({"expression"}));

  ToolResult r = calc->call({{"expression", "12*(3+4)"}});
  CHECK(r.observation == "84");
  CHECK(!r.error);
  r = calc->call({{"expr", "1"}});
  CHECK(r.error);
  CHECK(r.observation.find("bad arguments") != std::string::npos);
  CHECK(r.observation.find("expression") != std::string::npos);
  r = calc->call({{"expression", "1/0"}});
  CHECK(r.error);
  CHECK(r.observation.find("ZeroDivisionError") != std::string::npos);
  CHECK(r.observation.find("tools.py") != std::string::npos);  // the traceback points at the user's file

  std::shared_ptr<Tool> stats = make_python_function_tool(options(file, "stats"));
  CHECK(stats->call({{"values", {1, 2, 3}}}).observation == "{\"sum\": 6, \"count\": 3}");  // JSON for non-strings

  // A schema in the config replaces the signature's parameters; the name can be changed.
  PythonFunctionToolOptions renamed = options(file, "calculator");
  renamed.name = "calc";
  renamed.parameters = {{"type", "object"}, {"properties", {{"expression", {{"type", "string"}}}}}};
  std::shared_ptr<Tool> calc2 = make_python_function_tool(renamed);
  CHECK(calc2->name() == "calc");
  CHECK(calc2->schema()["function"]["parameters"] == renamed.parameters);

  CHECK_THROWS_WITH_AS(make_python_function_tool(options(file, "missing")), doctest::Contains("has no function missing"),
                       Error);
}

TEST_CASE("python tool: calls run in parallel; past the timeout the worker is replaced; a dead worker is unavailable") {
  TempDir dir;
  const std::string file = dir.path() + "/tools.py";
  std::ofstream(file) << kTools;
  std::shared_ptr<Tool> nap = make_python_function_tool(options(file, "nap", 1.0));
  // Two workers: two naps of 0.6 s take about 0.6 s, not 1.2.
  const auto start = std::chrono::steady_clock::now();
  std::thread other([&] { CHECK(nap->call({{"seconds", 0.6}}).observation == "awake after 0.6 s"); });
  CHECK(nap->call({{"seconds", 0.6}}).observation == "awake after 0.6 s");
  other.join();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1100));
  // Past the timeout: a tool_timeout stop, and the next call runs on a fresh worker.
  ToolResult late = nap->call({{"seconds", 5}});
  CHECK(late.stop == "tool_timeout");
  CHECK(late.error);
  CHECK(nap->call({{"seconds", 0}}).observation == "awake after 0 s");

  std::shared_ptr<Tool> die = make_python_function_tool(options(file, "die"));
  CHECK_THROWS_WITH_AS(die->call(nlohmann::json::object()), doctest::Contains("worker process ended"), ToolUnavailable);
  CHECK_THROWS_AS(die->call(nlohmann::json::object()), ToolUnavailable);  // replaced, and dies again
}
