// What the embedded-Python worker processes share (the Python reward worker,
// rewards/python/worker.h; the Python tool worker, agent/python_tool_worker.h): their
// line protocol's stdout, JSON to Python objects, and importing the user's file.
// Compiled with Python's flags (python/meson.build); include only from such files.
#pragma once

#include <nlohmann/json.hpp>
#include <pybind11/embed.h>

#include <cstdio>
#include <string>
#include <vector>

namespace tandem::python {

// A worker's start: claims stdout and stdin (claim_stdout, claim_stdin) and starts the interpreter. Null when
// either fails (an {"error"} line was sent where possible): the worker exits 1.
FILE* begin_worker();

// The protocol's own copy of stdout; fd 1 itself is pointed at stderr so print() in the
// user's code cannot corrupt a reply.
FILE* claim_stdout();
// Points stdout (the user's print()) and stderr at `path`, appending.
void redirect_output(const std::string& path);
// One protocol line.
void send(FILE* out, const nlohmann::json& message);
// The protocol's own copy of stdin; fd 0 itself is pointed at /dev/null, so user code that
// reads stdin cannot swallow requests. (begin_worker calls it.)
FILE* claim_stdin();
// The next request line from the request channel (claim_stdin), waited for with the GIL released (the user's Python
// threads run meanwhile). False at end of input. Needs the GIL held.
bool read_request(std::string& line);
// The JSON value as the Python object json.loads would make, built directly.
pybind11::object from_json(const nlohmann::json& value);
std::string type_name(const pybind11::handle& value);

struct ImportedFunction {
  pybind11::object fn;
  std::string error;  // non-empty: why not, for the user (Python's traceback included)
};
// Imports `file` as module PREFIX<stem> (its directory first on sys.path, then
// `search_path` in order) and finds `function` in it. `what` ("rewards", "tools") is for
// the explanation of a missing module; `kind` ("function", "class") names what is looked
// for in messages. Needs the GIL.
ImportedFunction import_function(const std::string& file, const std::string& function,
                                 const std::vector<std::string>& search_path, const std::string& module_prefix,
                                 const char* what, const char* kind = "function");

}  // namespace tandem::python
