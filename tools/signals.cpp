#include "tools/signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

#include "runtime/error.h"

namespace tools {

namespace {

// Only lock-free atomics may be touched from a signal handler.
std::atomic<int> g_signal{0};
std::atomic<bool> g_installed{false};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

struct sigaction g_previous_int, g_previous_term, g_previous_usr1;

extern "C" void on_stop_signal(int sig) {
    if (g_signal.load() != 0) _exit(130);  // second signal: abort now (the checkpoint may be missing)
    g_signal.store(sig);
    static const char kMsg[] =
        "\nslidefuse: stop requested: finishing the current step and writing a checkpoint "
        "(signal again to abort at once)\n";
    const ssize_t w = ::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    (void)w;
}

}  // namespace

StopSignals::StopSignals() {
    SF_CHECK(!g_installed.exchange(true), "StopSignals: handlers are already installed");
    g_signal.store(0);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // blocking reads/writes of the loop resume instead of failing with EINTR
    // SIGUSR1: what mpirun forwards to every rank as is (it turns SIGINT/SIGTERM into a SIGTERM
    // followed by SIGKILL about a second later), so the graceful stop of a data-parallel job.
    const bool ok = ::sigaction(SIGINT, &sa, &g_previous_int) == 0 && ::sigaction(SIGTERM, &sa, &g_previous_term) == 0 &&
                    ::sigaction(SIGUSR1, &sa, &g_previous_usr1) == 0;
    if (!ok) {
        g_installed.store(false);
        SF_FAIL("cannot install the SIGINT/SIGTERM/SIGUSR1 handlers: %s", std::strerror(errno));
    }
}

StopSignals::~StopSignals() {
    ::sigaction(SIGINT, &g_previous_int, nullptr);
    ::sigaction(SIGTERM, &g_previous_term, nullptr);
    ::sigaction(SIGUSR1, &g_previous_usr1, nullptr);
    g_installed.store(false);
}

int StopSignals::signal_number() const { return g_signal.load(); }

const char* signal_name(int sig) {
    switch (sig) {
        case SIGINT: return "SIGINT";
        case SIGTERM: return "SIGTERM";
        case SIGUSR1: return "SIGUSR1";
        default: return "signal";
    }
}

}  // namespace tools
