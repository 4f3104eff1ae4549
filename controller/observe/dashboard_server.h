// The live dashboard: an HTTP server on 127.0.0.1 (by default) with one page (embedded
// in the binary, controller/observe/dashboard/) and JSON endpoints over a run directory's files
// (controller/observe/dashboard/run_api.h). It reads only those files, so the same server runs in
// `tandem dashboard RUN_DIR` beside a running controller or after a run, and inside the
// controller with `logging.dashboard: true`. docs/dashboard.md describes the page.
//
// Exposure: on loopback (the default) it answers only requests whose Host is loopback's
// (no DNS rebinding); bound elsewhere it answers only clients holding a random token, which
// is in the URL written to RUN_DIR/dashboard_url (mode 0600), and warns. Connections are
// bounded in number and time (http_serving.h): observers cannot hurt the run.
//
// Threading: start() binds, then serves on a thread of its own (and a small pool of
// request threads); stop() and the destructor stop serving and join them.
#pragma once

#include <memory>
#include <string>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace tandem {

class DashboardServer {
 public:
  // port 0: any free port.
  DashboardServer(std::string run_dir, std::string bind = "127.0.0.1", int port = 0);
  ~DashboardServer();  // stops and joins
  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  // Listens (tandem::Error naming bind:port when it cannot) and serves on its own thread.
  // Writes the URL to RUN_DIR/dashboard_url (a warning, not an error, when the run
  // directory is read-only). Returns the port.
  int start();
  // http://BIND:PORT/ (the host name instead of a wildcard bind such as 0.0.0.0), with
  // ?token=... off loopback.
  std::string url() const;
  void stop();

 private:
  // Whether a request may be answered (else `response` says why): on loopback, a Host of
  // loopback's; elsewhere, the token (as ?token= or the cookie it sets).
  bool admit(const httplib::Request& request, httplib::Response& response) const;

  struct Impl;
  std::string token_;  // empty on loopback
  std::string run_dir_;
  std::string bind_;
  int port_;
  std::unique_ptr<Impl> impl_;
};

// RUN_DIR/dashboard_url: where the run's dashboard serves.
std::string dashboard_url_path(const std::string& run_dir);

}  // namespace tandem
