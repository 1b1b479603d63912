// Progress reporting for long jobs: a live status line on a terminal (rewritten in place), plain
// lines otherwise, plus an ETA estimate.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace tools {

std::string format_duration(double seconds);  // "1:02:03" / "2:03"

class Progress {
public:
    // first_step: steps already done when this session started (a resumed run); the ETA is
    // extrapolated from the steps of this session only.
    explicit Progress(int64_t total_steps, int64_t first_step = 0);
    // Prints one status line: "<prefix> step k/total | <body> | ETA ...".
    void update(int64_t done, const std::string& body);
    void finish();  // ends a live line with a newline
    double elapsed_s() const;

private:
    int64_t total_;
    int64_t first_ = 0;
    bool tty_;
    bool live_ = false;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace tools
