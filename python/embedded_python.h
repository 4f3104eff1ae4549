// The CPython interpreter embedded in tandem: Debian's libpython3 with its own standard
// library and site-packages (/usr/lib/python3/dist-packages), so reward files and chat
// templates use what `apt install python3-...` put there (numpy, sympy, jinja2).
//
// The interpreter starts once per process, on first use, and lives until exit. The
// thread that started it keeps the GIL: call into Python from that thread only (the
// reward worker's main thread; the controller's main thread for chat templates).
#pragma once

#include <string>

namespace pybind11 {
class error_already_set;
}

namespace tandem::python {

// Starts the interpreter if it is not running. Its home is the prefix libpython was
// built for (so a pyenv or venv python3 first on PATH does not change which standard
// library is used); PYTHONPATH still adds directories. Throws tandem::Error when it
// cannot start.
void ensure_started();

// The exception as Python prints it: "Traceback (most recent call last): ... ValueError: x".
std::string describe(const pybind11::error_already_set& error);

}  // namespace tandem::python
