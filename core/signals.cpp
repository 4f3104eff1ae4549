#include "core/signals.h"

#include <signal.h>

#include <atomic>

namespace tandem {
namespace {

std::atomic<int> received_signal{0};
std::atomic<int> stop_request{0};
std::atomic<bool> sigterm_stops{false};

void on_interrupt(int signal) {
  if (signal == SIGTERM && sigterm_stops && stop_request.exchange(signal) == 0) return;  // stop after the step
  if (received_signal.exchange(signal) != 0) {
    ::signal(signal, SIG_DFL);
    ::raise(signal);
  }
}

}  // namespace

void install_interrupt_handlers(bool stop_on_sigterm) {
  sigterm_stops = stop_on_sigterm;
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int pending_interrupt() { return received_signal.load(); }

Interrupted::Interrupted(int signal)
    : Error(signal == SIGINT ? "interrupted by SIGINT" : signal == SIGTERM ? "interrupted by SIGTERM" : "interrupted by a signal"),
      signal_(signal) {}

int pending_stop_request() { return stop_request.load(); }

}  // namespace tandem
