#include "tools/progress.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "runtime/log.h"

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

namespace {
double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Progress::Progress(int64_t total_steps, int64_t first_step)
    : total_(total_steps), first_(first_step), tty_(::isatty(::fileno(stdout)) != 0), start_(steady_seconds()) {}

void Progress::set_clock(Clock clock) {
    clock_ = clock;
    start_ = now();
    paused_total_ = 0;
    paused_at_ = -1;
    last_done_ = -1;
}

double Progress::now() const { return clock_ ? clock_() : steady_seconds(); }

double Progress::elapsed_s() const { return now() - start_; }

void Progress::pause() {
    if (paused_at_ < 0) paused_at_ = now();
}

void Progress::resume() {
    if (paused_at_ < 0) return;
    paused_total_ += now() - paused_at_;
    paused_at_ = -1;
}

Progress::Rates Progress::rates(int64_t done) {
    const double busy = elapsed_s() - paused_total_ - (paused_at_ >= 0 ? now() - paused_at_ : 0);
    Rates r;
    if (busy > 0) r.average = static_cast<double>(done - first_) / busy;
    if (last_done_ < 0) {
        r.recent = r.average;
        r.recent_seconds = busy;
    } else if (busy > last_busy_) {
        r.recent = static_cast<double>(done - last_done_) / (busy - last_busy_);
        r.recent_seconds = busy - last_busy_;
    }
    last_done_ = done;
    last_busy_ = busy;
    return r;
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
    rt::log_file_line(line);
}

void Progress::finish() {
    if (live_) std::printf("\n");
    live_ = false;
    std::fflush(stdout);
}

namespace {
void print_line(const std::string& line, bool live, void*) {
    if (live)
        std::printf("\r\033[K%s", line.c_str());
    else
        std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (!live) rt::log_file_line(line);
}
}  // namespace

CountProgress::CountProgress(std::string what, uint64_t total, bool tty, double interval_s)
    : what_(std::move(what)), total_(total), tty_(tty), interval_s_(interval_s), out_(print_line) {
    start_ = last_ = now();
}

void CountProgress::set_clock(Progress::Clock clock) {
    clock_ = clock;
    start_ = last_ = now();
}

void CountProgress::set_output(Output out, void* ctx) {
    out_ = out;
    ctx_ = ctx;
}

double CountProgress::now() const { return clock_ ? clock_() : steady_seconds(); }

void CountProgress::tick(uint64_t done) {
    const double t = now();
    const double wait = tty_ ? 0.1 : interval_s_;
    if (t - last_ < wait && !(tty_ && done == total_)) return;
    last_ = t;
    char line[160];
    std::snprintf(line, sizeof(line), "%s %llu/%llu (%s)", what_.c_str(), static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(total_), format_duration(t - start_).c_str());
    out_(line, tty_, ctx_);
    live_ = live_ || tty_;
}

void CountProgress::finish() {
    if (live_) out_("", true, ctx_);  // an empty live line erases the status
    live_ = false;
}

}  // namespace tools
