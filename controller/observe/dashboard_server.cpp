#include "controller/observe/dashboard_server.h"

#include "controller/observe/dashboard/assets.h"
#include "controller/observe/dashboard/run_api.h"
#include "controller/observe/http_serving.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/net_address.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>

namespace tandem {
namespace {

// Request threads: the page polls a handful of endpoints every second or two, and this
// server may run inside the controller, so a few threads are plenty.
constexpr size_t kRequestThreads = 4;

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
  http.new_task_queue = [] { return new httplib::ThreadPool(kRequestThreads); };
  HttpServing::refuse_shared_ports(http);
  http.set_keep_alive_timeout(2);  // stop() waits for idle keep-alive connections at most this long
  http.set_default_headers(common_headers());
  add_routes(http, impl_->api);
}

DashboardServer::~DashboardServer() { stop(); }

int DashboardServer::start() {
  TANDEM_CHECK(!impl_->serving.serving(), "the dashboard of {} is already serving at {}", run_dir_, url());
  const int port = impl_->serving.start(impl_->http, bind_, port_);
  if (port <= 0) {
    const std::string where = port_ == 0 ? bind_ + " (any free port)" : fmt::format("{}:{}", bind_, port_);
    throw Error(fmt::format("dashboard: cannot listen on {}: the port is taken, or {} is not an address of this host "
                            "(logging.dashboard_port / --port, --bind)",
                            where, bind_));
  }
  port_ = port;
  try {
    write_file_atomic(dashboard_url_path(run_dir_), url() + "\n");
  } catch (const std::exception& e) {
    log::warn("dashboard: serving at {}, but could not write {}: {}", url(), dashboard_url_path(run_dir_), e.what());
  }
  return port_;
}

std::string DashboardServer::url() const {
  std::string host = bind_;
  if (host.empty() || host == "0.0.0.0" || host == "::") host = this_hostname();
  if (host.find(':') != std::string::npos) host = "[" + host + "]";  // an IPv6 literal
  return fmt::format("http://{}:{}/", host, port_);
}

void DashboardServer::stop() { impl_->serving.stop(); }

}  // namespace tandem
