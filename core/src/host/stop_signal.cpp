#include "host/stop_signal.hpp"

#include <atomic>
#include <csignal>

namespace wanfw {

namespace {
std::atomic<int> g_signal{0};
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

extern "C" void on_stop_signal(int signal) {
  if (g_signal.load() != 0 && signal == SIGINT) {
    ::sigaction(SIGINT, &g_previous_int, nullptr);
    std::raise(SIGINT);
    return;
  }
  g_signal.store(signal);
}
}  // namespace

StopSignal::StopSignal() {
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &g_previous_int);
  ::sigaction(SIGTERM, &action, &g_previous_term);
}

StopSignal::~StopSignal() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

int StopSignal::received() { return g_signal.load(); }

}  // namespace wanfw
