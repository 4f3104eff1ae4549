#include "agent/python_environment_worker.h"

#include "python/embedded_python.h"
#include "python/jinja_render.h"
#include "python/worker_support.h"

#include <fmt/format.h>

#include <iostream>

namespace py = pybind11;

namespace tandem::python {

namespace {

// The instances and the checks of what they return, in Python.
constexpr const char* kHost = R"PY(
import inspect, json, math, sys, traceback


def _error_text(e):
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))
    return "\n".join(text.strip().splitlines()[-8:])


def _messages(value, what):
    if value is None:
        return []
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise TypeError("%s must be a string, a message {role, content}, a list of them, or None; got %s"
                        % (what, type(value).__name__))
    out = []
    for m in value:
        if isinstance(m, str):
            out.append({"role": "user", "content": m})
        elif isinstance(m, dict) and isinstance(m.get("content"), str):
            out.append({"role": str(m.get("role", "user")), "content": m["content"]})
        else:
            raise TypeError("%s: a message must be a string or a dict with a string \"content\"; got %r"
                            % (what, m))
    return out


def tandem_env_check(cls, kwargs):
    if not inspect.isclass(cls):
        return "%s is a %s, not a class" % (getattr(cls, "__name__", "it"), type(cls).__name__)
    for method, args in (("reset", ()), ("step", ("action",))):
        fn = getattr(cls, method, None)
        if not callable(fn):
            return "class %s has no %s() method" % (cls.__name__, method)
        try:
            inspect.signature(fn).bind(None, *args)
        except TypeError as e:
            return "%s.%s must take (self%s): %s" % (cls.__name__, method, "".join(", " + a for a in args), e)
        except ValueError:
            pass
    try:
        inspect.signature(cls).bind({}, **kwargs)
    except TypeError as e:
        return "%s.__init__ must take (self, row, **kwargs) with environment.kwargs %s: %s" % (
            cls.__name__, json.dumps(kwargs), e)
    except ValueError:
        pass
    return ""


class TandemEnvHost:
    def __init__(self, cls, kwargs):
        self.cls, self.kwargs, self.envs = cls, kwargs, {}

    def start(self, id, row):
        try:
            env = self.cls(row, **self.kwargs)
        except Exception as e:
            return {"error": "%s(row) raised:\n%s" % (self.cls.__name__, _error_text(e))}
        try:
            messages = _messages(env.reset(), "reset()'s return value")
        except Exception as e:
            return {"error": "reset() raised:\n%s" % _error_text(e)}
        if not messages:
            return {"error": "reset() returned no message: the model would have nothing to answer"}
        self.envs[id] = env
        return {"messages": messages}

    def step(self, id, action):
        env = self.envs.get(id)
        if env is None:
            return {"error": "no environment instance %d" % id}
        try:
            result = env.step(action)
        except Exception as e:
            text = _error_text(e)
            print("step() raised:\n" + text, file=sys.stderr, flush=True)
            return {"error": text}
        try:
            if not isinstance(result, tuple) or len(result) not in (4, 5):
                raise TypeError("step() must return (observation, reward, done, info) or (observation, reward, "
                                "terminated, truncated, info); got %r" % (result,))
            observation, reward = result[0], float(result[1])
            done = bool(result[2]) or (len(result) == 5 and bool(result[3]))
            if not math.isfinite(reward):
                raise ValueError("step() returned the reward %r: rewards must be finite" % reward)
            return {"messages": _messages(observation, "step()'s observation"), "reward": reward, "done": done}
        except (TypeError, ValueError) as e:
            print(str(e), file=sys.stderr, flush=True)
            return {"error": str(e)}

    def close(self, id):
        self.envs.pop(id, None)
)PY";

// The prompt for `before` + `messages`, or why not.
nlohmann::json render_prompt(const nlohmann::json& chat_template, const nlohmann::json& before,
                             const nlohmann::json& messages) {
  nlohmann::json all = before.is_array() ? before : nlohmann::json::array();
  for (const nlohmann::json& m : messages) all.push_back(m);
  try {
    return {{"messages", messages}, {"prompt", render_environment_prompt(chat_template, all)}};
  } catch (const std::exception& e) {
    return {{"error", fmt::format("rendering reset()'s messages with the chat template failed: {}", e.what())}};
  }
}

}  // namespace

int run_environment_worker(const EnvironmentWorkerOptions& options) {
  FILE* out = begin_worker();
  if (!out) return 1;
  py::gil_scoped_acquire gil;
  const nlohmann::json kwargs = nlohmann::json::parse(options.kwargs_json, nullptr, false);
  if (!kwargs.is_object()) {
    send(out, {{"error", fmt::format("--kwargs is not a JSON object: {}", options.kwargs_json)}});
    return 1;
  }
  ImportedFunction imported =
      import_function(options.file, options.class_name, options.search_path, "tandem_env_", "environments", "class");
  if (!imported.error.empty()) {
    send(out, {{"error", imported.error}});
    return 1;
  }
  py::dict scope;
  py::object host;
  try {
    py::exec(kHost, scope);
    const std::string problem = scope["tandem_env_check"](imported.fn, from_json(kwargs)).cast<std::string>();
    if (!problem.empty()) {
      send(out, {{"error", fmt::format("{}: {}", options.file, problem)}});
      return 1;
    }
    host = scope["TandemEnvHost"](imported.fn, from_json(kwargs));
  } catch (const py::error_already_set& e) {
    send(out, {{"error", fmt::format("{}: setting up {} failed:\n{}", options.file, options.class_name, describe(e))}});
    return 1;
  }
  send(out, {{"ready", true}});
  py::object dumps = py::module_::import("json").attr("dumps");
  nlohmann::json chat_template;
  std::string line;
  while (read_request(line)) {
    const nlohmann::json request = nlohmann::json::parse(line, nullptr, false);
    const std::string op = request.is_object() ? request.value("op", "") : "";
    if (op == "template") {
      chat_template = request.value("chat_template", nlohmann::json());
      continue;
    }
    if (op == "close") {
      host.attr("close")(request.value("id", uint64_t{0}));
      continue;
    }
    if (op != "start" && op != "step") {
      std::fprintf(stderr, "env-worker: bad request line: %s\n", line.substr(0, 200).c_str());
      return 1;
    }
    try {
      const uint64_t id = request.value("id", uint64_t{0});
      if (op == "start") {
        nlohmann::json reply =
            nlohmann::json::parse(dumps(host.attr("start")(id, from_json(request.value("row", nlohmann::json::object())))).cast<std::string>());
        if (reply.contains("messages")) {
          reply = render_prompt(chat_template, request.value("before", nlohmann::json::array()), reply["messages"]);
          if (reply.contains("error")) host.attr("close")(id);
        }
        send(out, reply);
      } else {
        send(out, nlohmann::json::parse(
                      dumps(host.attr("step")(id, request.value("action", std::string()))).cast<std::string>()));
      }
    } catch (const py::error_already_set& e) {  // a BaseException (SystemExit, KeyboardInterrupt)
      send(out, {{"error", describe(e)}});
    }
  }
  return 0;
}

}  // namespace tandem::python
