#include "tools/cli_numbers.h"

#include <cmath>
#include <exception>

#include "runtime/error.h"

namespace tools {

namespace {

// True when conv (std::stoi / std::stod) reads all of v into *x.
template <class T, class Conv>
bool read_whole(const std::string& v, Conv conv, T* x) {
    size_t used = 0;
    try {
        *x = conv(v, &used);
    } catch (const std::exception&) {
        return false;
    }
    return used == v.size();
}

bool read_double(const std::string& v, double* x) {
    return read_whole(v, [](const std::string& s, size_t* u) { return std::stod(s, u); }, x);
}

}  // namespace

int parse_int_at_least(const std::string& opt, const std::string& v, int lo) {
    int x = 0;
    const bool ok = read_whole(v, [](const std::string& s, size_t* u) { return std::stoi(s, u); }, &x);
    SF_CHECK(ok && x >= lo, "%s: expected an integer >= %d, got '%s'", opt.c_str(), lo, v.c_str());
    return x;
}

double parse_seconds(const std::string& opt, const std::string& v) {
    double x = 0;
    SF_CHECK(read_double(v, &x) && x >= 0 && x < 1e6, "%s: expected seconds >= 0, got '%s'", opt.c_str(), v.c_str());
    return x;
}

double parse_nonnegative(const std::string& opt, const std::string& v) {
    double x = 0;
    SF_CHECK(read_double(v, &x) && x >= 0 && std::isfinite(x), "%s: expected a number >= 0, got '%s'", opt.c_str(),
             v.c_str());
    return x;
}

}  // namespace tools
