#include "tests/support/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "runtime/exec.h"
#include "runtime/hash.h"
#include "runtime/log.h"
#include "tests/support/test_record.h"

namespace sftest {

double rel_l2(const double* got, const double* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) return std::numeric_limits<double>::infinity();
        const double d = got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& ref) {
    if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
    return rel_l2(got.data(), ref.data(), got.size());
}

namespace {
std::string describe(const std::vector<double>& got, const std::vector<double>& ref, const std::string& what,
                     const std::function<bool(size_t)>& bad) {
    std::ostringstream os;
    double max_abs = 0, max_rel = 0;
    size_t arg_abs = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double a = std::fabs(got[i] - ref[i]);
        const double r = a / std::max(std::fabs(ref[i]), 1e-30);
        if (!(a <= max_abs)) {
            max_abs = a;
            arg_abs = i;
        }
        if (!(r <= max_rel)) max_rel = r;
    }
    os << (what.empty() ? "" : what + ": ") << "n=" << got.size() << " rel_l2=" << rel_l2(got, ref)
       << " max_abs=" << max_abs << " (at " << arg_abs << ") max_rel=" << max_rel << "; first mismatches:";
    int shown = 0;
    for (size_t i = 0; i < got.size() && shown < 8; ++i) {
        if (bad(i)) {
            os << " [" << i << "] got " << got[i] << " want " << ref[i] << ";";
            ++shown;
        }
    }
    return os.str();
}
}  // namespace

::testing::AssertionResult close_rel_l2(const std::vector<double>& got, const std::vector<double>& ref, double tol,
                                        const std::string& what) {
    if (got.size() != ref.size())
        return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
    const double e = rel_l2(got, ref);
    if (e <= tol) return ::testing::AssertionSuccess();
    const double scale = std::sqrt(dot(ref, ref) / std::max<size_t>(ref.size(), 1));
    return ::testing::AssertionFailure() << describe(got, ref, what, [&](size_t i) {
               return !(std::fabs(got[i] - ref[i]) <= tol * std::max(scale, std::fabs(ref[i])));
           }) << " (tolerance " << tol << ")";
}

::testing::AssertionResult close_elementwise(const std::vector<double>& got, const std::vector<double>& ref,
                                             double atol, double rtol, const std::string& what) {
    if (got.size() != ref.size())
        return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
    auto bad = [&](size_t i) { return !(std::fabs(got[i] - ref[i]) <= atol + rtol * std::fabs(ref[i])); };
    for (size_t i = 0; i < got.size(); ++i)
        if (bad(i))
            return ::testing::AssertionFailure()
                   << describe(got, ref, what, bad) << " (atol " << atol << ", rtol " << rtol << ")";
    return ::testing::AssertionSuccess();
}

namespace {
uint64_t splitmix(uint64_t& s) { return rt::mix64(s += rt::kGoldenGamma); }
}  // namespace

std::vector<double> random_uniform(size_t n, uint64_t seed, double lo, double hi) {
    std::vector<double> v(n);
    uint64_t s = seed;
    for (auto& x : v) x = lo + (hi - lo) * static_cast<double>(splitmix(s) >> 11) * 0x1.0p-53;
    return v;
}

std::vector<double> random_ints(size_t n, uint64_t seed, int lo, int hi) {
    std::vector<double> v(n);
    uint64_t s = seed;
    const uint64_t span = static_cast<uint64_t>(hi - lo + 1);
    for (auto& x : v) x = lo + static_cast<double>(splitmix(s) % span);
    return v;
}

std::vector<double> numeric_gradient(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x,
                                     double h) {
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double x0 = x[i];
        x[i] = x0 + h;
        const double fp = f(x);
        x[i] = x0 - h;
        const double fm = f(x);
        x[i] = x0;
        g[i] = (fp - fm) / (2 * h);
    }
    return g;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
    return s;
}

bool gpu_available(std::string* why) { return rt::cuda_device_available(why); }

uint32_t crc32_bitwise(const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
        c ^= p[i];
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

namespace {
// Warnings and errors logged during a test fail it (a test that expects one installs its own sink).
class FailOnWarning : public ::testing::EmptyTestEventListener {
    void OnTestStart(const ::testing::TestInfo&) override {
        rt::set_log_sink([](rt::LogLevel level, const std::string& msg) {
            if (level >= rt::LogLevel::Warn) ADD_FAILURE() << "unexpected " << rt::log_level_name(level) << ": " << msg;
        });
    }
    void OnTestEnd(const ::testing::TestInfo&) override { rt::set_log_sink(nullptr); }
};
struct Register {
    Register() {
        ::testing::UnitTest::GetInstance()->listeners().Append(new FailOnWarning);
        install_test_record();  // SF_TEST_RECORD: the per-test record a suite runner reads (test_record.h)
    }
};
}  // namespace

// Registered from a static initializer in this library; referenced by every test binary through
// sftest::gpu_available / rel_l2, so the object file is always linked.
static Register g_register;

std::string source_dir() {
    const char* env = std::getenv("SF_SOURCE_DIR");
    if (env && *env) return env;
#ifdef SF_SOURCE_DIR
    return SF_SOURCE_DIR;
#else
    return ".";  // targets that compile this file alone (the ThreadSanitizer loader test) read no sources
#endif
}

}  // namespace sftest
