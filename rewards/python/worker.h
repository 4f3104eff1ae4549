// The process that runs a Python reward function: `tandem reward-worker --file F
// --function NAME [--batched] [--kwargs JSON] [--path DIR]...`, started by the
// controller's reward pool (rewards/python/pool.h), never by users.
//
// Protocol: one JSON object per line. The worker imports F (its directory first on
// sys.path, so sibling modules import) and writes {"ready": true}, or {"error": TEXT} and
// exits 1. Then for each request line {"calls": [{"data_source", "solution_str",
// "ground_truth", "extra_info"}, ...]} it writes one line per call, in order, as soon as
// that call returns: {"score": S, "parts": {NAME: VALUE}} or {"error": TEXT}. A line
// {"log": PATH} points the worker's stdout and stderr at PATH (appending; no reply). End
// of input ends the worker (exit 0).
//
// The function is called as verl calls it, by keyword: compute_score(data_source=,
// solution_str=, ground_truth=, extra_info=, **reward_kwargs), so any signature that
// binds those names works (positional order, keyword-only, **kwargs). Before `ready` the
// worker checks that the signature binds them, and says which name it cannot take. It
// returns a number (bool and numpy scalars too) or a dict with "score" and other entries;
// the numeric ones become parts, the rest (a predicted answer string, say) are ignored.
// With --batched it is called once per request with keyword lists (data_sources=,
// solution_strs=, ground_truths=, extra_infos=, **reward_kwargs) and returns a list of
// such values, one per call.
//
// --kwargs: a JSON object, the reward's reward_kwargs. --path: directories put on
// sys.path after the file's own (the config's python.path). An import that fails for a
// missing module says which Python is embedded, its search path and how to add one.
//
// What the user's code prints goes to stderr (the worker's log): stdout carries only the
// protocol.
#pragma once

#include <string>
#include <vector>

namespace tandem::python {

struct RewardWorkerOptions {
  std::string file;
  std::string function = "compute_score";
  bool batched = false;
  std::string kwargs_json = "{}";       // reward_kwargs
  std::vector<std::string> search_path;  // python.path
};

int run_reward_worker(const RewardWorkerOptions& options);

}  // namespace tandem::python
