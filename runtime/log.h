// Logging: levelled lines to stderr, or to a replaceable sink (tests install one that turns
// warnings into failures). Thread-safe; one line per call.
#pragma once
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
const char* log_level_name(LogLevel level);

}  // namespace rt

#define SF_LOG_DEBUG(...) ::rt::log_message(::rt::LogLevel::Debug, ::rt::format(__VA_ARGS__))
#define SF_LOG_INFO(...) ::rt::log_message(::rt::LogLevel::Info, ::rt::format(__VA_ARGS__))
#define SF_LOG_WARN(...) ::rt::log_message(::rt::LogLevel::Warn, ::rt::format(__VA_ARGS__))
#define SF_LOG_ERROR(...) ::rt::log_message(::rt::LogLevel::Error, ::rt::format(__VA_ARGS__))
