#include "python/worker_support.h"

#include "python/embedded_python.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace py = pybind11;

namespace tandem::python {

namespace {

// A ModuleNotFoundError's explanation: which Python this is, where it looks, how to add more.
std::string explain_missing_module(const char* what) {
  py::module_ sys = py::module_::import("sys");
  std::string path;
  for (const py::handle entry : sys.attr("path")) path += "\n    " + entry.cast<std::string>();
  return fmt::format(
      "\ntandem runs {} in its embedded Python {} (prefix {}), which imports from:{}\n"
      "To use packages from a virtualenv or another install, add its site-packages directory to the config's "
      "`python: {{path: [DIR]}}` (or to PYTHONPATH), or install the package with apt (python3-NAME).",
      what, py::module_::import("platform").attr("python_version")().cast<std::string>(),
      sys.attr("prefix").cast<std::string>(), path);
}


}  // namespace

// The protocol's own copy of stdout; fd 1 itself is pointed at stderr so print() in the
// user's code cannot corrupt a reply.
FILE* claim_stdout() {
  // Close-on-exec: a process the user's code starts must not hold the pipe open.
  const int reply_fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  return ::fdopen(reply_fd, "w");
}

// Points stdout (the user's print()) and stderr at `path`, appending.
void redirect_output(const std::string& path) {
  std::fflush(stdout);
  std::fflush(stderr);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "worker: cannot open %s: %s\n", path.c_str(), std::strerror(errno));
    return;
  }
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
}

void send(FILE* out, const nlohmann::json& message) {
  const std::string line = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

namespace {
FILE* requests = nullptr;  // the protocol's own copy of stdin (claim_stdin)
}  // namespace

FILE* claim_stdin() {
  const int request_fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (request_fd < 0 || null_fd < 0) return nullptr;
  ::dup2(null_fd, STDIN_FILENO);  // input() or sys.stdin.read() in user code reads nothing
  ::close(null_fd);
  requests = ::fdopen(request_fd, "r");
  return requests;
}

bool read_request(std::string& line) {
  pybind11::gil_scoped_release idle;
  char* text = nullptr;
  size_t capacity = 0;
  const ssize_t n = requests ? ::getline(&text, &capacity, requests) : -1;
  if (n > 0) line.assign(text, static_cast<size_t>(text[n - 1] == '\n' ? n - 1 : n));
  std::free(text);
  return n > 0;
}

py::object from_json(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return py::none();
    case nlohmann::json::value_t::string:
      return py::str(value.get_ref<const std::string&>());
    case nlohmann::json::value_t::boolean:
      return py::bool_(value.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return py::int_(value.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(value.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return py::float_(value.get<double>());
    case nlohmann::json::value_t::array: {
      py::list list;
      for (const nlohmann::json& item : value) list.append(from_json(item));
      return std::move(list);
    }
    case nlohmann::json::value_t::object: {
      py::dict dict;
      for (const auto& [key, item] : value.items()) dict[py::str(key)] = from_json(item);
      return std::move(dict);
    }
    default:
      return py::none();
  }
}

std::string type_name(const py::handle& value) { return py::str(py::type::of(value).attr("__name__")); }


FILE* begin_worker() {
  FILE* out = claim_stdout();
  if (!out) return nullptr;
  if (!claim_stdin()) {
    send(out, {{"error", fmt::format("cannot move the request channel off stdin: {}", std::strerror(errno))}});
    return nullptr;
  }
  try {
    ensure_started();
  } catch (const std::exception& e) {
    send(out, {{"error", e.what()}});
    return nullptr;
  }
  return out;
}

ImportedFunction import_function(const std::string& file, const std::string& function,
                                 const std::vector<std::string>& search_path, const std::string& module_prefix,
                                 const char* what, const char* kind) {
  ImportedFunction out;
  try {
    py::object sys_path = py::module_::import("sys").attr("path");
    // The file's directory first (sibling modules), then python.path in its order.
    for (auto it = search_path.rbegin(); it != search_path.rend(); ++it) sys_path.attr("insert")(0, *it);
    sys_path.attr("insert")(0, std::filesystem::path(file).parent_path().string());
    py::module_ util = py::module_::import("importlib.util");
    const std::string module_name = module_prefix + std::filesystem::path(file).stem().string();
    py::object spec = util.attr("spec_from_file_location")(module_name, file);
    if (spec.is_none()) {
      out.error = fmt::format("{} cannot be imported as a Python module (expected a .py file)", file);
      return out;
    }
    py::object module = util.attr("module_from_spec")(spec);
    py::module_::import("sys").attr("modules")[py::str(module_name)] = module;
    spec.attr("loader").attr("exec_module")(module);
    if (!py::hasattr(module, function.c_str())) {
      std::vector<std::string> callables;
      for (const py::handle name : py::list(module.attr("__dict__").attr("keys")())) {
        const std::string n = py::str(name);
        if (n.rfind("_", 0) != 0 && PyCallable_Check(module.attr(name).ptr())) callables.push_back(n);
      }
      out.error = fmt::format("{} has no {} {} (its functions and classes: {})", file, kind, function,
                              callables.empty() ? std::string("none") : fmt::format("{}", fmt::join(callables, ", ")));
      return out;
    }
    out.fn = module.attr(function.c_str());
    if (!PyCallable_Check(out.fn.ptr())) {
      out.error = fmt::format("{}: {} is a {}, not a {}", file, function, type_name(out.fn), kind);
    }
  } catch (const py::error_already_set& e) {
    const std::string more = e.matches(PyExc_ModuleNotFoundError) ? explain_missing_module(what) : std::string();
    out.error = fmt::format("importing {} failed:\n{}{}", file, describe(e), more);
  }
  return out;
}

}  // namespace tandem::python
