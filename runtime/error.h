// Errors: one throwing family. Every failed check throws rt::Error with
// "file:line: expression: message". Used at API boundaries (shapes, dtypes, sealed arena,
// CUDA/cuDNN/cuBLAS status), never inside per-element loops.
#pragma once
#include <cstdarg>
#include <stdexcept>
#include <string>

namespace rt {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what), message_(what) {}
    // what() = "location: message"; the CLI prints message() and logs location() at debug level.
    Error(const std::string& message, const std::string& location)
        : std::runtime_error(location + ": " + message), message_(message), location_(location) {}
    const std::string& message() const { return message_; }
    const std::string& location() const { return location_; }  // "file:line: expression", or ""

private:
    std::string message_, location_;
};

// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char* fmt, va_list ap);

// Builds "file:line: expr: message" and throws rt::Error.
[[noreturn]] void throw_error(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace rt

// SF_CHECK(cond, fmt, ...): always on. The message is formatted only on failure.
#define SF_CHECK(cond, ...)                                                                   \
    do {                                                                                      \
        if (!(cond)) ::rt::throw_error(__FILE__, __LINE__, #cond, ::rt::format(__VA_ARGS__)); \
    } while (0)

// SF_FAIL(fmt, ...): unconditional error at a point that must not be reached for valid input.
#define SF_FAIL(...) ::rt::throw_error(__FILE__, __LINE__, "failed", ::rt::format(__VA_ARGS__))
