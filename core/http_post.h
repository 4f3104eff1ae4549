// One JSON POST over HTTP(S) with libcurl: what HTTP rewards (rewards/http.h) and HTTP
// tools (agent/http_tool.h) send. Thread-safe; no signals (timeouts work from any thread).
#pragma once

#include <string>

namespace tandem {

struct HttpPostResult {
  long status = 0;         // 0: no HTTP answer (the connection failed or timed out)
  std::string body;        // the answer, or curl's message when status is 0
  bool permanent = false;  // no answer, and trying again cannot help (a malformed URL, an answer over 16 MiB)
  bool timed_out = false;  // no answer within timeout_s
};

HttpPostResult http_post_json(const std::string& url, const std::string& body, double timeout_s);

}  // namespace tandem
