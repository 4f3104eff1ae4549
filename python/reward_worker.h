// The process that runs a Python reward function: `tandem reward-worker --file F
// --function NAME [--batched]`, started by the controller's reward pool
// (controller/python_reward_pool.h), never by users.
//
// Protocol: one JSON object per line. The worker imports F (its directory first on
// sys.path, so sibling modules import) and writes {"ready": true}, or {"error": TEXT} and
// exits 1. Then for each request line {"calls": [{"data_source", "solution_str",
// "ground_truth", "extra_info"}, ...]} it writes one line per call, in order, as soon as
// that call returns: {"score": S, "parts": {NAME: VALUE}} or {"error": TEXT}. A line
// {"log": PATH} points the worker's stdout and stderr at PATH (appending; no reply). End
// of input ends the worker (exit 0).
//
// The function has verl's signature, compute_score(data_source, solution_str,
// ground_truth, extra_info=None), and returns a number (bool and numpy scalars too) or a
// dict with "score" and other entries; the numeric ones become parts, the rest (a
// predicted answer string, say) are ignored. With --batched it is called once per request
// with keyword lists (data_sources=, solution_strs=, ground_truths=, extra_infos=) and
// returns a list of such values, one per call.
//
// What the user's code prints goes to stderr (the worker's log): stdout carries only the
// protocol.
#pragma once

#include <string>

namespace tandem::python {

int run_reward_worker(const std::string& file, const std::string& function, bool batched);

}  // namespace tandem::python
