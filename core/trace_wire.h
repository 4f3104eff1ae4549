// The trace commands every traced worker serves (controller/cli/worker.cpp):
// trace_clock (its clock) and trace_collect (its spans, drained), as typed bodies
// (core/worker_commands.capnp), and the controller's reading of their replies.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace tandem::trace {

std::string clock_reply_body();
std::string collected_reply_body();  // drains this process's spans, like collect_json()

// `what` names the reply for errors.
int64_t read_clock_reply(const std::string& body, const std::string& what);
// In collect_json()'s shape, which controller/observe/step_trace.h reads.
nlohmann::json read_collected_reply(const std::string& body, const std::string& what);

}  // namespace tandem::trace
