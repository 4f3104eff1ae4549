#include "controller/observe/dashboard_server.h"

#include "controller/observe/dashboard/assets.h"
#include "controller/observe/dashboard/run_api.h"
#include "controller/observe/http_serving.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/net_address.h"
#include "core/text.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>

namespace tandem {
namespace {

// Every response: the page and its data are live (never cached), and the page may only
// load its own script and style: samples are model output, and even if one slipped into
// the page as markup no script of it would run.
httplib::Headers common_headers() {
  return {{"Cache-Control", "no-store"},
          {"X-Content-Type-Options", "nosniff"},
          {"Content-Security-Policy",
           "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
           "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"}};
}

class BadQuery : public Error {
 public:
  using Error::Error;
};

double number_param(const httplib::Request& request, const char* name, double fallback) {
  if (!request.has_param(name)) return fallback;
  const std::string text = request.get_param_value(name);
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && std::isfinite(value)) return value;
  } catch (const std::exception&) {
  }
  throw BadQuery(fmt::format("query parameter {}={} is not a number", name, text));
}

size_t count_param(const httplib::Request& request, const char* name, size_t fallback, size_t most) {
  const double value = number_param(request, name, static_cast<double>(fallback));
  if (value < 0 || value != std::floor(value)) {
    throw BadQuery(fmt::format("query parameter {}={} is not a count", name, request.get_param_value(name)));
  }
  return value > static_cast<double>(most) ? most : static_cast<size_t>(value);
}

void reply_json(httplib::Response& response, std::string body) {
  response.set_content(std::move(body), "application/json; charset=utf-8");
}

void add_routes(httplib::Server& http, dashboard::RunApi& api) {
  constexpr double kFromStart = -std::numeric_limits<double>::infinity();
  http.Get("/api/status", [&api](const httplib::Request&, httplib::Response& response) {
    reply_json(response, api.status());
  });
  http.Get("/api/metrics", [&api](const httplib::Request& request, httplib::Response& response) {
    reply_json(response, api.metrics(number_param(request, "after", kFromStart),
                                     count_param(request, "max_points", 4000, 1000000)));
  });
  http.Get("/api/samples", [&api](const httplib::Request& request, httplib::Response& response) {
    reply_json(response, api.samples(count_param(request, "n", 12, 500)));
  });
  http.Get("/api/phases", [&api](const httplib::Request& request, httplib::Response& response) {
    reply_json(response, api.phases(number_param(request, "after", kFromStart), count_param(request, "limit", 200, 1000)));
  });
  http.Get("/api/errors", [&api](const httplib::Request& request, httplib::Response& response) {
    reply_json(response, api.errors(count_param(request, "n", 40, 1000)));
  });
  // Everything else is one of the embedded files (there is no file system path here).
  http.Get(".*", [](const httplib::Request& request, httplib::Response& response) {
    const dashboard::Asset* asset = dashboard::find_asset(request.path);
    if (asset == nullptr) {
      response.status = 404;
      response.set_content("not found: " + request.path + "\n", "text/plain; charset=utf-8");
      return;
    }
    response.set_content(reinterpret_cast<const char*>(asset->data), asset->size, asset->content_type);
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
    std::string message = "unknown error";
    try {
      std::rethrow_exception(error);
    } catch (const BadQuery& e) {
      response.status = 400;
      message = e.what();
    } catch (const std::exception& e) {
      response.status = 500;
      message = e.what();
    }
    response.set_content(nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                         "application/json; charset=utf-8");
  });
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address == "::1" || address.rfind("127.", 0) == 0;
}

// The host of a Host header: "name:port", "[v6]:port" or "name".
std::string host_name_of(const std::string& header) {
  if (!header.empty() && header.front() == '[') return header.substr(1, header.find(']') - 1);
  return header.substr(0, header.find(':'));
}

// 128 random bits, hex.
std::string random_token() {
  unsigned char bytes[16] = {};
  std::ifstream random("/dev/urandom", std::ios::binary);
  random.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  if (!random) throw Error("dashboard: cannot read /dev/urandom for the access token");
  std::string token;
  for (unsigned char b : bytes) token += fmt::format("{:02x}", b);
  return token;
}

}  // namespace

struct DashboardServer::Impl {
  explicit Impl(const std::string& run_dir) : api(run_dir) {}
  httplib::Server http;
  dashboard::RunApi api;
  HttpServing serving;  // after `http`: stops before it goes
};

std::string dashboard_url_path(const std::string& run_dir) { return run_dir + "/dashboard_url"; }

DashboardServer::DashboardServer(std::string run_dir, std::string bind, int port)
    : run_dir_(std::move(run_dir)), bind_(std::move(bind)), port_(port), impl_(std::make_unique<Impl>(run_dir_)) {
  TANDEM_CHECK(port_ >= 0 && port_ <= 65535, "dashboard port {} is not in 0..65535", port_);
  httplib::Server& http = impl_->http;
  HttpServing::refuse_shared_ports(http);
  http.set_keep_alive_timeout(2);  // stop() waits for idle keep-alive connections at most this long
  http.set_default_headers(common_headers());
  if (!is_loopback(bind_)) token_ = random_token();
  http.set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
    return admit(request, response) ? httplib::Server::HandlerResponse::Unhandled
                                    : httplib::Server::HandlerResponse::Handled;
  });
  add_routes(http, impl_->api);
}

bool DashboardServer::admit(const httplib::Request& request, httplib::Response& response) const {
  auto refuse = [&](int status, const std::string& why) {
    response.status = status;
    response.set_content(why + "\n", "text/plain; charset=utf-8");
    return false;
  };
  if (token_.empty()) {
    // Served on loopback only: a page elsewhere that resolves its own name to 127.0.0.1
    // (DNS rebinding) sends its own name as Host, and is refused.
    const std::string host = host_name_of(request.get_header_value("Host"));
    if (host != "localhost" && host != "127.0.0.1" && host != "::1" && host != bind_) {
      return refuse(421, "this dashboard answers to localhost, 127.0.0.1 or [::1] only");
    }
    return true;
  }
  // Off loopback: the token in the URL RUN_DIR/dashboard_url holds (mode 0600), then the
  // cookie it sets (so the page's own requests carry it).
  const std::string cookie = "tandem_dashboard=" + token_;
  if (request.get_param_value("token") == token_) {
    response.set_header("Set-Cookie", cookie + "; HttpOnly; SameSite=Strict; Path=/");
    return true;
  }
  for (std::string part : split(request.get_header_value("Cookie"), ';')) {
    part.erase(0, part.find_first_not_of(' '));  // "a=1; b=2": each after the first starts with a space
    if (part == cookie) return true;
  }
  return refuse(401, "this dashboard needs its token: open the URL in the run directory's dashboard_url file");
}

DashboardServer::~DashboardServer() { stop(); }

int DashboardServer::start() {
  TANDEM_CHECK(!impl_->serving.serving(), "the dashboard of {} is already serving at {}", run_dir_, url());
  HttpLimits limits;
  limits.threads = 8;            // the page polls five endpoints; a few slow clients leave it room
  limits.max_connections = 64;
  limits.max_connection_s = 10;  // the page's keep-alive connections are simply reopened
  const int port = impl_->serving.start(impl_->http, bind_, port_, limits);
  if (port <= 0) {
    const std::string where = port_ == 0 ? bind_ + " (any free port)" : fmt::format("{}:{}", bind_, port_);
    throw Error(fmt::format("dashboard: cannot listen on {}: the port is taken, or {} is not an address of this host "
                            "(logging.dashboard_port / --port, --bind)",
                            where, bind_));
  }
  port_ = port;
  if (!token_.empty()) {
    log::warn("dashboard: serving the run's data on {} beyond this machine; only a client with the URL in {} "
              "(mode 0600) is answered, over plain HTTP (anyone on the path can read it)",
              bind_, dashboard_url_path(run_dir_));
  }
  try {
    write_file_atomic(dashboard_url_path(run_dir_), url() + "\n", 0600);
  } catch (const std::exception& e) {
    log::warn("dashboard: serving at {}, but could not write {}: {}", url(), dashboard_url_path(run_dir_), e.what());
  }
  return port_;
}

std::string DashboardServer::url() const {
  std::string host = bind_;
  if (host.empty() || host == "0.0.0.0" || host == "::") host = this_hostname();
  if (host.find(':') != std::string::npos) host = "[" + host + "]";  // an IPv6 literal
  return fmt::format("http://{}:{}/{}", host, port_, token_.empty() ? "" : "?token=" + token_);
}

void DashboardServer::stop() { impl_->serving.stop(); }

}  // namespace tandem
