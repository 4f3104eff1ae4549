// HTTP tools (agent/http_tool.h) against a loopback server this test runs (cpp-httplib,
// 127.0.0.1 only): the call's JSON, output and error answers the model reads, 4xx read
// by the model, 5xx and refused connections as ToolUnavailable, a slow server as a
// tool_timeout stop.
#include "agent/http_tool.h"
#include "core/error.h"

#include <doctest/doctest.h>
#include <httplib.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

using namespace tandem;

namespace {

class ToolServer {
 public:
  ToolServer() {
    server_.Post("/tool", [](const httplib::Request& request, httplib::Response& response) {
      const nlohmann::json call = nlohmann::json::parse(request.body);
      response.set_content(nlohmann::json{{"output", "searched " + call["name"].get<std::string>() + " for " +
                                                         call["arguments"]["query"].get<std::string>()}}
                               .dump(),
                           "application/json");
    });
    server_.Post("/empty", [](const httplib::Request&, httplib::Response& response) {
      response.set_content(R"({"error": "nothing found"})", "application/json");
    });
    server_.Post("/bad", [](const httplib::Request&, httplib::Response& response) {
      response.status = 422;
      response.set_content("query must not be empty", "text/plain");
    });
    server_.Post("/down", [](const httplib::Request&, httplib::Response& response) { response.status = 503; });
    server_.Post("/slow", [](const httplib::Request&, httplib::Response& response) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      response.set_content(R"({"output": "late"})", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(server_.is_running());
  }
  ~ToolServer() {
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

std::shared_ptr<Tool> tool_at(const std::string& url, double timeout_s = 5) {
  HttpToolOptions o;
  o.url = url;
  o.name = "search";
  o.description = "Searches the wiki.";
  o.parameters = {{"type", "object"}, {"properties", {{"query", {{"type", "string"}}}}}, {"required", {"query"}}};
  o.timeout_s = timeout_s;
  return make_http_tool(o);
}

}  // namespace

TEST_CASE("http tool: answers the model reads, failures of the server apart, timeouts") {
  ToolServer server;
  const nlohmann::json args = {{"query", "bubblewrap"}};
  std::shared_ptr<Tool> search = tool_at(server.url("/tool"));
  CHECK(search->name() == "search");
  CHECK(search->schema()["function"]["description"] == "Searches the wiki.");
  CHECK(search->schema()["function"]["parameters"]["required"][0] == "query");
  ToolResult r = search->call(args);
  CHECK(r.observation == "searched search for bubblewrap");
  CHECK(!r.error);

  r = tool_at(server.url("/empty"))->call(args);
  CHECK(r.error);
  CHECK(r.observation == "Error: nothing found");
  r = tool_at(server.url("/bad"))->call(args);
  CHECK(r.error);
  CHECK(r.observation.find("422") != std::string::npos);
  CHECK(r.observation.find("query must not be empty") != std::string::npos);
  CHECK(r.stop.empty());

  CHECK_THROWS_WITH_AS(tool_at(server.url("/down"))->call(args), doctest::Contains("answered 503"), ToolUnavailable);
  // A loopback port nothing listens on: bound, never listened on, closed.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  const std::string refused = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/tool";
  CHECK_THROWS_AS(tool_at(refused, 2)->call(args), ToolUnavailable);

  const auto start = std::chrono::steady_clock::now();
  r = tool_at(server.url("/slow"), 0.3)->call(args);
  CHECK(r.stop == "tool_timeout");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1200));
}
