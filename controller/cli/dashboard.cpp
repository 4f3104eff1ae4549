// `tandem dashboard RUN_DIR [--port P] [--bind ADDR]`: serves the run's live dashboard
// (controller/observe/dashboard_server.h) until SIGINT or SIGTERM. It reads the run directory and
// writes only RUN_DIR/dashboard_url there.
#include "controller/cli/cli.h"
#include "controller/observe/dashboard_server.h"
#include "core/error.h"
#include "core/signals.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

namespace tandem {

int cli_dashboard(const DashboardArgs& args) {
  std::error_code ec;
  if (!std::filesystem::is_directory(args.run_dir, ec)) {
    throw UsageError(fmt::format("tandem dashboard: {} is not a directory (give a run directory: the --run-dir of "
                                 "`tandem run`, or runs/<name>-<time>)",
                                 args.run_dir));
  }
  if (!std::filesystem::is_regular_file(args.run_dir + "/config.yaml", ec)) {
    throw UsageError(fmt::format("tandem dashboard: {} is not a run directory (no config.yaml in it)", args.run_dir));
  }
  if (args.port < 0 || args.port > 65535) {
    throw UsageError(fmt::format("tandem dashboard: --port {} is not in 0..65535 (0: any free port)", args.port));
  }
  install_interrupt_handlers();
  DashboardServer server(args.run_dir, args.bind, args.port);
  server.start();
  std::printf("%s\n", server.url().c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "tandem dashboard: serving %s at %s (Ctrl-C stops)\n", args.run_dir.c_str(), server.url().c_str());
  while (pending_interrupt() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server.stop();
  return 0;
}

}  // namespace tandem
