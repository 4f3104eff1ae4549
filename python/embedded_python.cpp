#include "python/embedded_python.h"

#include "core/error.h"

#include <pybind11/embed.h>

#include <fmt/format.h>

#include <mutex>

namespace py = pybind11;

namespace tandem::python {

void ensure_started() {
  static std::once_flag started;
  std::call_once(started, [] {
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    // argv[0] decides Python's prefix search otherwise: a python3 from pyenv first on
    // PATH would bring its own standard library and lose Debian's dist-packages.
    PyStatus status = PyConfig_SetBytesString(&config, &config.home, TANDEM_PYTHON_HOME);
    if (PyStatus_Exception(status)) {
      PyConfig_Clear(&config);
      throw Error(fmt::format("cannot start the embedded Python ({}): {}", TANDEM_PYTHON_HOME,
                              status.err_msg ? status.err_msg : "PyConfig_SetBytesString failed"));
    }
    config.install_signal_handlers = 0;  // SIGINT and SIGTERM stay tandem's
    config.parse_argv = 0;
    try {
      py::initialize_interpreter(&config, 0, nullptr, false);
    } catch (const std::exception& e) {
      throw Error(fmt::format("cannot start the embedded Python (home {}): {}", TANDEM_PYTHON_HOME, e.what()));
    }
  });
}

std::string describe(const py::error_already_set& error) {
  try {
    py::module_ traceback = py::module_::import("traceback");
    py::list lines = traceback.attr("format_exception")(error.type(), error.value(), error.trace());
    std::string text;
    for (const py::handle line : lines) text += line.cast<std::string>();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  } catch (const std::exception&) {
    return error.what();
  }
}

}  // namespace tandem::python
