#include "runtime/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "runtime/error.h"

namespace rt {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::Info)};
std::mutex g_mutex;
LogSink g_sink;
}  // namespace

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

void log_message(LogLevel level, const std::string& msg) {
    if (static_cast<int>(level) < g_level.load()) return;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_sink) {
        g_sink(level, msg);
        return;
    }
    std::fprintf(stderr, "[slidefuse %s] %s\n", log_level_name(level), msg.c_str());
    std::fflush(stderr);
}

}  // namespace rt
