// Progress reporting for long jobs: a live status line on a terminal (rewritten in place), plain
// lines otherwise (both also appended to the run's log file, runtime/log.h), an ETA estimate, and
// the rate of work: recent (since the previous rate reading) and average (this session).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace tools {

std::string format_duration(double seconds);  // "1:02:03" / "2:03"

class Progress {
public:
    // first_step: steps already done when this session started (a resumed run); the ETA and the
    // average rate count the steps of this session only.
    explicit Progress(int64_t total_steps, int64_t first_step = 0);
    // Prints one status line: "step k/total | <body> | elapsed ... ETA ...".
    void update(int64_t done, const std::string& body);
    void finish();  // ends a live line with a newline
    double elapsed_s() const;

    // Steps per second: `recent` over the steps since the previous call (the last log interval;
    // the average when this is the first call), `average` since the session started. Time spent
    // in pause()..resume() (validation, checkpoints) counts in neither.
    struct Rates {
        double recent = 0;
        double average = 0;
        double recent_seconds = 0;  // the busy seconds `recent` is measured over
    };
    Rates rates(int64_t done);
    void pause();
    void resume();

    // Injected clock for tests: seconds since an arbitrary origin; null = steady_clock.
    using Clock = double (*)();
    void set_clock(Clock clock);

private:
    double now() const;

    int64_t total_;
    int64_t first_ = 0;
    bool tty_;
    bool live_ = false;
    Clock clock_ = nullptr;
    double start_ = 0;
    double paused_total_ = 0, paused_at_ = -1;  // seconds paused; start of the current pause
    int64_t last_done_ = -1;
    double last_busy_ = 0;  // busy seconds at the previous rates() call
};

// Progress of a count of items inside a longer job (validation batches within training): on a
// terminal a live line "<what> k/total" (at most ~10 updates a second), otherwise a plain line
// every `interval_s` seconds; the plain lines also go to the log file. The output function is
// replaceable (tests).
class CountProgress {
public:
    using Output = void (*)(const std::string& line, bool live, void* ctx);
    CountProgress(std::string what, uint64_t total, bool tty, double interval_s = 10.0);
    void tick(uint64_t done);  // after item `done` (1-based)
    void finish();             // clears a live line
    void set_clock(Progress::Clock clock);
    void set_output(Output out, void* ctx);

private:
    double now() const;

    std::string what_;
    uint64_t total_;
    bool tty_;
    double interval_s_;
    Progress::Clock clock_ = nullptr;
    Output out_ = nullptr;
    void* ctx_ = nullptr;
    double start_ = 0, last_ = 0;
    bool live_ = false;
};

}  // namespace tools
