#include "core/http_post.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <mutex>

namespace tandem {

namespace {

// Answers are scores or a tool's output: a bigger one is a misbehaving server, and reading
// it whole would cost the controller its memory.
constexpr size_t kMaxAnswerBytes = 16u << 20;

struct Answer {
  std::string body;
  bool too_large = false;
};

size_t append_to_answer(char* data, size_t size, size_t count, void* out) {
  Answer& answer = *static_cast<Answer*>(out);
  if (answer.body.size() + size * count > kMaxAnswerBytes) {
    answer.too_large = true;
    return 0;  // curl aborts the transfer (CURLE_WRITE_ERROR)
  }
  answer.body.append(data, size * count);
  return size * count;
}

}  // namespace

HttpPostResult http_post_json(const std::string& url, const std::string& body, double timeout_s) {
  static std::once_flag initialised;
  std::call_once(initialised, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpPostResult response;
  CURL* curl = curl_easy_init();
  if (!curl) {
    response.body = "curl_easy_init failed";
    return response;
  }
  char error[CURL_ERROR_SIZE] = "";
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  // At least 1 ms: 0 would mean no limit at all.
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, std::max(1L, static_cast<long>(timeout_s * 1000)));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: callers post from threads
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  Answer answer;
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_to_answer);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
  const CURLcode code = curl_easy_perform(curl);
  response.body = std::move(answer.body);
  if (answer.too_large) {
    response.body = fmt::format("the answer is larger than {} MiB; it was cut off unread", kMaxAnswerBytes >> 20);
    response.permanent = true;
  } else if (code == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  } else {
    response.body = error[0] ? error : curl_easy_strerror(code);
    // A malformed URL or an unsupported scheme fails the same way every time.
    response.permanent = code == CURLE_URL_MALFORMAT || code == CURLE_UNSUPPORTED_PROTOCOL;
    response.timed_out = code == CURLE_OPERATION_TIMEDOUT;
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return response;
}

}  // namespace tandem
