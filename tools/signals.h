// SIGINT/SIGTERM/SIGUSR1 for long jobs (slidefuse train, docs/CHECKPOINTS.md "Signals"). While a
// StopSignals object lives, the first SIGINT, SIGTERM or SIGUSR1 only records itself (an async-signal-safe,
// lock-free atomic store plus one write(2) to stderr); the training loop polls requested() between
// steps, finishes the step, writes a checkpoint and exits 0. A second signal ends the process at
// once with _exit(130). The destructor restores the handlers that were installed before.
#pragma once

namespace tools {

class StopSignals {
public:
    StopSignals();  // throws if another StopSignals is alive
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;

    bool requested() const { return signal_number() != 0; }
    int signal_number() const;  // the first signal received (SIGINT, SIGTERM or SIGUSR1), 0 = none
};

const char* signal_name(int sig);  // "SIGINT", "SIGTERM", "SIGUSR1", else "signal"

}  // namespace tools
