// Logging: levelled lines to stderr, or to a replaceable sink (tests install one that turns
// warnings into failures), and a run's log file. Thread-safe; one line per call.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace rt {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

using LogSink = std::function<void(LogLevel, const std::string&)>;

void set_log_level(LogLevel level);
LogLevel log_level();
// Replaces the sink; returns the previous one. An empty sink restores the default (stderr).
LogSink set_log_sink(LogSink sink);
void log_message(LogLevel level, const std::string& msg);
// Prepended to every log line (a data-parallel rank's "[rank 1/4] "); empty by default.
void set_log_prefix(const std::string& prefix);
// Off: console_line() prints nothing (the ranks other than 0 of a data-parallel job).
void set_console_enabled(bool on);
const char* log_level_name(LogLevel level);

// A run's console log file (train.log in the run folder). While one is open, every log line
// (whatever the sink) and every console line is appended to it, each with a UTC timestamp; the
// lines of this process before it opened (the device report, dataset generation; at most
// kLogBacklog of them) are written first. Throws rt::Error when the file cannot be opened.
constexpr size_t kLogBacklog = 1000;
void open_log_file(const std::string& path, bool append);
void close_log_file();
// A line of the console's story: printed to stdout and appended to the log file.
void console_line(const std::string& line);
// Appended to the log file only (a progress line that stdout shows rewritten in place).
void log_file_line(const std::string& line);

}  // namespace rt

#define SF_LOG_DEBUG(...) ::rt::log_message(::rt::LogLevel::Debug, ::rt::format(__VA_ARGS__))
#define SF_LOG_INFO(...) ::rt::log_message(::rt::LogLevel::Info, ::rt::format(__VA_ARGS__))
#define SF_LOG_WARN(...) ::rt::log_message(::rt::LogLevel::Warn, ::rt::format(__VA_ARGS__))
#define SF_LOG_ERROR(...) ::rt::log_message(::rt::LogLevel::Error, ::rt::format(__VA_ARGS__))
#define SF_CONSOLE(...) ::rt::console_line(::rt::format(__VA_ARGS__))
