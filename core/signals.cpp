#include "core/signals.h"

#include <signal.h>

#include <atomic>

namespace tandem {
namespace {

std::atomic<int> received_signal{0};

void on_interrupt(int signal) {
  if (received_signal.exchange(signal) != 0) {
    ::signal(signal, SIG_DFL);
    ::raise(signal);
  }
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int pending_interrupt() { return received_signal.load(); }

}  // namespace tandem
