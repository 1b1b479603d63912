#include "runtime/profile.h"

#include <cuda_profiler_api.h>
#include <nvtx3/nvToolsExt.h>

#include <cerrno>
#include <cstdlib>

#include "runtime/cuda_check.h"
#include "runtime/error.h"

namespace rt {

Scope::Scope(const Exec& ex, const char* name) : ex_(ex), name_(name) {
    nvtxRangePushA(name);
    if (ex_.observer) ex_.observer->begin(ex_, name_);
}

Scope::~Scope() {
    if (ex_.observer) ex_.observer->end(ex_, name_);
    nvtxRangePop();
}

void profiler_start() { SF_CUDA_CHECK(cudaProfilerStart()); }
void profiler_stop() { SF_CUDA_CHECK(cudaProfilerStop()); }

StepRange parse_step_range(const std::string& s) {
    const size_t colon = s.find(':');
    SF_CHECK(colon != std::string::npos, "profile steps '%s': expected FIRST:LAST, e.g. 100:110", s.c_str());
    auto parse = [&](const std::string& part) {
        SF_CHECK(!part.empty(), "profile steps '%s': expected FIRST:LAST, e.g. 100:110", s.c_str());
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(part.c_str(), &end, 10);
        SF_CHECK(errno == 0 && end && *end == '\0' && v >= 1, "profile steps '%s': '%s' is not a step number >= 1",
                 s.c_str(), part.c_str());
        return v;
    };
    StepRange r{parse(s.substr(0, colon)), parse(s.substr(colon + 1))};
    SF_CHECK(r.last >= r.first, "profile steps '%s': the last step is before the first", s.c_str());
    return r;
}

}  // namespace rt
