// Test support: captures every log line while alive, replacing the sink that turns warnings into
// test failures (for tests that expect a warning); the previous sink comes back at scope exit.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "runtime/log.h"

namespace sftest {

struct LogLines {
    std::vector<std::pair<rt::LogLevel, std::string>> lines;
    rt::LogSink previous;
    LogLines()
        : previous(rt::set_log_sink([this](rt::LogLevel l, const std::string& m) { lines.emplace_back(l, m); })) {}
    ~LogLines() { rt::set_log_sink(previous); }
    LogLines(const LogLines&) = delete;
    LogLines& operator=(const LogLines&) = delete;
    // A line at `level` that contains `part`.
    bool has(rt::LogLevel level, const std::string& part) const {
        for (const auto& l : lines)
            if (l.first == level && l.second.find(part) != std::string::npos) return true;
        return false;
    }
    int warnings() const {
        int n = 0;
        for (const auto& l : lines) n += l.first >= rt::LogLevel::Warn;
        return n;
    }
};

}  // namespace sftest
