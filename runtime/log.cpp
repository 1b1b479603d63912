#include "runtime/log.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>

#include "runtime/error.h"

namespace rt {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::Info)};
std::mutex g_mutex;
LogSink g_sink;
std::string g_prefix;                 // set_log_prefix
std::atomic<bool> g_console{true};   // set_console_enabled
std::FILE* g_file = nullptr;        // the open log file, or null
std::deque<std::string> g_backlog;  // stamped lines before a file opened (oldest dropped first)

// "2026-11-23T21:05:07Z " + line: to the file when one is open, else into the backlog.
// Called with g_mutex held.
void to_file(const std::string& line) {
    char stamp[32];
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ ", &tm);
    if (g_file) {
        std::fprintf(g_file, "%s%s\n", stamp, line.c_str());
        std::fflush(g_file);
        return;
    }
    g_backlog.push_back(stamp + line);
    if (g_backlog.size() > kLogBacklog) g_backlog.pop_front();
}
}  // namespace

void open_log_file(const std::string& path, bool append) {
    std::lock_guard<std::mutex> lock(g_mutex);
    std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
    SF_CHECK(f != nullptr, "cannot write the log file %s: %s", path.c_str(), std::strerror(errno));
    if (g_file) std::fclose(g_file);
    g_file = f;
    for (const std::string& l : g_backlog) std::fprintf(g_file, "%s\n", l.c_str());
    g_backlog.clear();
    std::fflush(g_file);
}

void close_log_file() {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_file) std::fclose(g_file);
    g_file = nullptr;
}

void set_console_enabled(bool on) { g_console = on; }

void console_line(const std::string& line) {
    if (!g_console.load()) return;
    std::lock_guard<std::mutex> lock(g_mutex);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    to_file(line);
}

void log_file_line(const std::string& line) {
    std::lock_guard<std::mutex> lock(g_mutex);
    to_file(line);
}

const char* log_level_name(LogLevel level) {
    switch (level) {
        case LogLevel::Debug: return "debug";
        case LogLevel::Info: return "info";
        case LogLevel::Warn: return "warn";
        case LogLevel::Error: return "error";
    }
    return "?";
}

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

LogSink set_log_sink(LogSink sink) {
    std::lock_guard<std::mutex> lock(g_mutex);
    LogSink old = std::move(g_sink);
    g_sink = std::move(sink);
    return old;
}

void set_log_prefix(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_prefix = prefix;
}

void log_message(LogLevel level, const std::string& msg) {
    if (static_cast<int>(level) < g_level.load()) return;
    std::lock_guard<std::mutex> lock(g_mutex);
    to_file(format("[slidefuse %s] %s%s", log_level_name(level), g_prefix.c_str(), msg.c_str()));
    if (g_sink) {
        g_sink(level, g_prefix + msg);
        return;
    }
    std::fprintf(stderr, "[slidefuse %s] %s%s\n", log_level_name(level), g_prefix.c_str(), msg.c_str());
    std::fflush(stderr);
}

}  // namespace rt
