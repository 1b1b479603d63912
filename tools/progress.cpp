#include "tools/progress.h"

#include <unistd.h>

#include <cstdio>

namespace tools {

std::string format_duration(double s) {
    if (!(s >= 0) || s > 1e8) return "--:--";
    const long t = static_cast<long>(s + 0.5);
    char buf[32];
    if (t >= 3600)
        std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        std::snprintf(buf, sizeof(buf), "%ld:%02ld", t / 60, t % 60);
    return buf;
}

Progress::Progress(int64_t total_steps, int64_t first_step)
    : total_(total_steps),
      first_(first_step),
      tty_(::isatty(::fileno(stdout)) != 0),
      start_(std::chrono::steady_clock::now()) {}

double Progress::elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(int64_t done, const std::string& body) {
    const double el = elapsed_s();
    const int64_t this_session = done - first_;
    const double eta =
        this_session > 0 ? el * static_cast<double>(total_ - done) / static_cast<double>(this_session) : -1;
    const std::string line = "step " + std::to_string(done) + "/" + std::to_string(total_) + " | " + body +
                             " | elapsed " + format_duration(el) + " ETA " + format_duration(eta);
    if (tty_) {
        std::printf("\r\033[K%s", line.c_str());
        live_ = true;
    } else {
        std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
}

void Progress::finish() {
    if (live_) std::printf("\n");
    live_ = false;
    std::fflush(stdout);
}

}  // namespace tools
