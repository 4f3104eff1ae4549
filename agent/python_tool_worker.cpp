#include "agent/python_tool_worker.h"

#include "python/embedded_python.h"
#include "python/worker_support.h"

#include <fmt/format.h>

#include <iostream>

namespace py = pybind11;

namespace tandem::python {

namespace {

// Schema and call helpers, in Python: inspect does the reading of signatures.
constexpr const char* kHelpers = R"PY(
import inspect, json, traceback, typing

_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array",
               tuple: "array", dict: "object"}

def tandem_tool_schema(fn, name):
    doc = inspect.getdoc(fn) or ""
    description, arg_docs, in_args = [], {}, False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            if not stripped:
                continue
            head, sep, text = stripped.partition(":")
            if sep and head and not line.startswith(" " * 8):
                arg_docs[head.split("(")[0].strip()] = text.strip()
            continue
        description.append(line)
    properties, required = {}, []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        prop = {}
        if p.annotation is not p.empty:
            origin = typing.get_origin(p.annotation) or p.annotation
            prop["type"] = _JSON_TYPES.get(origin, "string")
        if p.name in arg_docs:
            prop["description"] = arg_docs[p.name]
        properties[p.name] = prop
        if p.default is p.empty:
            required.append(p.name)
    return {"type": "function", "function": {
        "name": name, "description": "\n".join(description).strip(),
        "parameters": {"type": "object", "properties": properties, "required": required}}}

def tandem_tool_call(fn, arguments):
    try:
        inspect.signature(fn).bind(**arguments)
    except TypeError as e:
        return {"error": "bad arguments: %s" % e}
    except ValueError:
        pass  # no signature to check (a builtin): the call will tell
    try:
        value = fn(**arguments)
    except Exception as e:  # the traceback from the tool's own frame on, its end
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))
        return {"error": "\n".join(text.strip().splitlines()[-6:])}
    if isinstance(value, str):
        return {"output": value}
    try:
        return {"output": json.dumps(value, ensure_ascii=False)}
    except (TypeError, ValueError):
        return {"output": str(value)}
)PY";

}  // namespace

int run_tool_worker(const ToolWorkerOptions& options) {
  FILE* out = begin_worker();
  if (!out) return 1;
  py::gil_scoped_acquire gil;
  const std::string name = options.name.empty() ? options.function : options.name;
  ImportedFunction imported = import_function(options.file, options.function, options.search_path, "tandem_tool_", "tools");
  if (!imported.error.empty()) {
    send(out, {{"error", imported.error}});
    return 1;
  }
  py::dict helpers;
  std::string schema;  // JSON text in Python's key order, as the chat template will show it
  try {
    py::exec(kHelpers, helpers);
    const py::object made = helpers["tandem_tool_schema"](imported.fn, name);
    schema = py::module_::import("json").attr("dumps")(made, py::arg("ensure_ascii") = false).cast<std::string>();
  } catch (const py::error_already_set& e) {
    send(out, {{"error", fmt::format("{}: reading {}'s signature failed:\n{}", options.file, options.function, describe(e))}});
    return 1;
  }
  const std::string ready = "{\"ready\": true, \"schema\": " + schema + "}\n";
  std::fwrite(ready.data(), 1, ready.size(), out);
  std::fflush(out);
  py::object call = helpers["tandem_tool_call"];
  py::object dumps = py::module_::import("json").attr("dumps");
  std::string line;
  while (read_request(line)) {
    nlohmann::json request = nlohmann::json::parse(line, nullptr, false);
    if (!request.is_object() || !request.contains("arguments") || !request["arguments"].is_object()) {
      std::fprintf(stderr, "tool-worker: bad request line: %s\n", line.substr(0, 200).c_str());
      return 1;
    }
    try {
      const py::object result = call(imported.fn, from_json(request["arguments"]));
      send(out, nlohmann::json::parse(dumps(result).cast<std::string>()));
    } catch (const py::error_already_set& e) {  // a BaseException (SystemExit, KeyboardInterrupt)
      send(out, {{"error", describe(e)}});
    }
  }
  return 0;
}

}  // namespace tandem::python
