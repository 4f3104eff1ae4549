// A tool served over HTTP (`tools: [{http: URL, name: NAME, schema: {...}, description}]`):
// a team's search service, a code runner elsewhere. Each call is one JSON POST
//   {"name": NAME, "arguments": {...}}
// answered with 200 and {"output": TEXT} (what the model reads) or {"error": TEXT} (an
// error the model reads: bad arguments, nothing found). Other answers:
//   4xx (but 429)              an error the model reads, with the status and body
//   429, 5xx, no connection     ToolUnavailable (the tool runner tries once more, then the
//                               trajectory ends with tool_error)
//   no answer in timeout_s      a tool_timeout stop
#pragma once

#include "agent/tool.h"

#include <memory>
#include <string>

namespace tandem {

struct HttpToolOptions {
  std::string url;
  std::string name;
  std::string description;
  nlohmann::ordered_json parameters;  // the parameters' schema; null or {}: an object with no declared properties
  double timeout_s = 10.0;
};

std::shared_ptr<Tool> make_http_tool(const HttpToolOptions& options);

}  // namespace tandem
