#include "agent/http_tool.h"

#include "core/error.h"
#include "core/http_post.h"

namespace tandem {

namespace {

class HttpTool : public Tool {
 public:
  explicit HttpTool(const HttpToolOptions& options) : options_(options) {
    nlohmann::ordered_json parameters = options.parameters;
    if (!parameters.is_object() || parameters.empty()) {
      parameters = {{"type", "object"}, {"properties", nlohmann::ordered_json::object()}};
    }
    schema_ = {{"type", "function"},
               {"function", {{"name", options.name}, {"description", options.description}, {"parameters", parameters}}}};
  }

  std::string name() const override { return options_.name; }
  nlohmann::ordered_json schema() const override { return schema_; }

  ToolResult call(const nlohmann::json& arguments) override {
    const std::string body = nlohmann::json{{"name", options_.name}, {"arguments", arguments}}.dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
    const HttpPostResult answer = http_post_json(options_.url, body, options_.timeout_s);
    ToolResult result;
    if (answer.timed_out) {
      result.error = true;
      result.stop = "tool_timeout";
      result.observation = fmt::format("Error: the tool did not answer within {} s", options_.timeout_s);
      return result;
    }
    if (answer.status == 0 || answer.status == 429 || answer.status >= 500) {
      throw ToolUnavailable(fmt::format("tool {} ({}): {}", options_.name, options_.url,
                                        answer.status == 0 ? answer.body
                                                           : fmt::format("answered {}: {}", answer.status,
                                                                         answer.body.substr(0, 200))));
    }
    if (answer.status != 200) {
      result.error = true;
      result.observation = fmt::format("Error: the tool answered {}: {}", answer.status, answer.body.substr(0, 500));
      return result;
    }
    const nlohmann::json reply = nlohmann::json::parse(answer.body, nullptr, false);
    if (reply.is_object() && reply.contains("output") && reply["output"].is_string()) {
      result.observation = reply["output"].get<std::string>();
    } else if (reply.is_object() && reply.contains("error") && reply["error"].is_string()) {
      result.error = true;
      result.observation = "Error: " + reply["error"].get<std::string>();
    } else {
      result.error = true;
      result.observation = fmt::format("Error: the tool's answer is not {{\"output\": ...}} or {{\"error\": ...}}: {}",
                                       answer.body.substr(0, 300));
    }
    return result;
  }

 private:
  HttpToolOptions options_;
  nlohmann::ordered_json schema_;
};

}  // namespace

std::shared_ptr<Tool> make_http_tool(const HttpToolOptions& options) {
  TANDEM_CHECK(!options.name.empty(), "an HTTP tool needs a name");
  return std::make_shared<HttpTool>(options);
}

}  // namespace tandem
