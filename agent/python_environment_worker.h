// The process that hosts a Python environment's instances (`environment: {python: F,
// class: C}`): `tandem env-worker --file F --class C [--kwargs JSON] [--path DIR]...`,
// started by a rollout worker's environment pool (agent/python_environment.h), never by
// users.
//
// Protocol: one JSON object per line. The worker imports F, finds class C and checks its
// methods' signatures (__init__(self, row, **kwargs), reset(self), step(self, action)),
// then writes {"ready": true}, or {"error": TEXT} and exits 1. Requests:
//   {"op": "template", "chat_template": {source, special_tokens, variables}}   no reply
//   {"op": "start", "id": N, "row": {...}, "before": [messages]}
//       makes C(row, **kwargs) and calls reset() -> {"messages": [...], "prompt": TEXT}
//       (the prompt: before + the messages through the chat template, ending with the
//       assistant's header) or {"error": TEXT}
//   {"op": "step", "id": N, "action": TEXT}
//       -> {"messages": [...], "reward": R, "done": B} or {"error": TEXT}
//   {"op": "close", "id": N}                                                  no reply
// Messages are [{role, content}]: reset() and step() may return a string (one user
// message), a message dict, a list of either, or None (no message). step() returns
// (observation, reward, done, info), or gymnasium's (observation, reward, terminated,
// truncated, info). End of input ends the worker; what the environment prints goes to
// stderr (the worker's log).
#pragma once

#include <string>
#include <vector>

namespace tandem::python {

struct EnvironmentWorkerOptions {
  std::string file;
  std::string class_name;
  std::string kwargs_json = "{}";
  std::vector<std::string> search_path;  // python.path
};

int run_environment_worker(const EnvironmentWorkerOptions& options);

}  // namespace tandem::python
