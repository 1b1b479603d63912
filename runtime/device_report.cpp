// Device report and support decision (runtime/device_report.h).
#include "runtime/device_report.h"

#include <cstdlib>
#include <mutex>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/log.h"

#ifndef SF_CUDA_ARCHITECTURES
#define SF_CUDA_ARCHITECTURES ""
#endif

namespace rt {

namespace {

std::string cc_string(int cc) { return format("%d.%d", cc / 10, cc % 10); }

ArchTarget parse_one(const std::string& entry) {
    ArchTarget t;
    size_t i = 0;
    while (i < entry.size() && entry[i] >= '0' && entry[i] <= '9') t.cc = t.cc * 10 + (entry[i++] - '0');
    SF_CHECK(i > 0 && t.cc >= 10 && t.cc < 1000, "CUDA architecture '%s': expected a number such as 89 or 120-real",
             entry.c_str());
    if (i < entry.size() && (entry[i] == 'a' || entry[i] == 'f')) {
        t.arch_specific = true;
        ++i;
    }
    const std::string kind = entry.substr(i);
    t.sass = kind.empty() || kind == "-real";
    t.ptx = kind.empty() || kind == "-virtual";
    SF_CHECK(t.sass || t.ptx, "CUDA architecture '%s': unknown suffix '%s' (allowed: -real, -virtual)", entry.c_str(),
             kind.c_str());
    return t;
}

// "sm_89, sm_90, sm_120 and PTX compute_120"
std::string describe_archs(const std::vector<ArchTarget>& archs) {
    std::string sass, ptx;
    for (const ArchTarget& t : archs) {
        const std::string n = std::to_string(t.cc) + (t.arch_specific ? "a" : "");
        if (t.sass) sass += (sass.empty() ? "sm_" : ", sm_") + n;
        if (t.ptx) ptx += (ptx.empty() ? "PTX compute_" : ", PTX compute_") + n;
    }
    if (sass.empty()) return ptx;
    return ptx.empty() ? sass : sass + " and " + ptx;
}

}  // namespace

std::vector<ArchTarget> parse_cuda_architectures(const std::string& list) {
    std::vector<ArchTarget> out;
    if (list.empty() || list == "native" || list == "all" || list == "all-major") return out;
    size_t start = 0;
    while (start <= list.size()) {
        const size_t end = std::min(list.find_first_of(";,", start), list.size());
        const std::string entry = list.substr(start, end - start);
        if (!entry.empty()) out.push_back(parse_one(entry));
        start = end + 1;
    }
    return out;
}

const std::string& built_cuda_architectures() {
    static const std::string s = SF_CUDA_ARCHITECTURES;
    return s;
}

namespace {

// "" unless a driver reports an older CUDA major version than this build's runtime needs.
std::string driver_too_old(int driver_version, int runtime_version) {
    if (driver_version > 0 && runtime_version > 0 && driver_version / 1000 < runtime_version / 1000)
        return format("the NVIDIA driver supports CUDA %d.%d, this build needs a driver for CUDA %d.x: update it",
                      driver_version / 1000, driver_version % 1000 / 10, runtime_version / 1000);
    return "";
}

}  // namespace

DeviceSupport decide_device_support(int cc, int driver_version, int runtime_version,
                                    const std::vector<ArchTarget>& archs) {
    DeviceSupport s;
    const std::string rebuild =
        format("rebuild for it: CMAKE_ARGS=-DCMAKE_CUDA_ARCHITECTURES=%d ./scripts/setup.sh", cc);
    if (cc < kMinComputeCapability) {
        s.message = format("compute capability %s is below %s, the minimum of slidefuse's kernels (BF16 tensor cores)",
                           cc_string(cc).c_str(), cc_string(kMinComputeCapability).c_str());
        return s;
    }
    s.message = driver_too_old(driver_version, runtime_version);
    if (!s.message.empty()) return s;
    if (archs.empty()) {  // native / all: nvcc chose; trust it
        s.ok = true;
        s.how = "architectures chosen by nvcc";
        return s;
    }
    for (const ArchTarget& t : archs) {
        const bool match = t.arch_specific ? t.cc == cc : t.cc / 10 == cc / 10 && t.cc % 10 <= cc % 10;
        if (t.sass && match) {
            s.ok = true;
            s.how = format("sm_%d code", t.cc);
            return s;
        }
    }
    const ArchTarget* best = nullptr;  // the newest PTX that a cc device can JIT
    for (const ArchTarget& t : archs)
        if (t.ptx && !t.arch_specific && t.cc <= cc && (!best || t.cc > best->cc)) best = &t;
    if (!best) {
        s.message = format("this build carries %s, none of which runs on compute capability %s; %s",
                           describe_archs(archs).c_str(), cc_string(cc).c_str(), rebuild.c_str());
        return s;
    }
    if (driver_version > 0 && driver_version < runtime_version) {
        s.message = format(
            "this build has no sm_%d code and its PTX (compute_%d) was written by CUDA %d.%d, newer than the driver "
            "(CUDA %d.%d) can JIT-compile: update the driver or %s",
            cc, best->cc, runtime_version / 1000, runtime_version % 1000 / 10, driver_version / 1000,
            driver_version % 1000 / 10, rebuild.c_str());
        return s;
    }
    s.ok = true;
    s.how = format("PTX compute_%d JIT-compiled by the driver", best->cc);
    return s;
}

std::string device_report_line(const DeviceInfo& d, const DeviceSupport& s) {
    const std::string archs = built_cuda_architectures().empty() ? "?" : built_cuda_architectures();
    return format(
        "GPU %d: %s, compute capability %d.%d, %d SMs, %.1f GiB; driver CUDA %s, runtime CUDA %s; built for %s (%s)",
        d.ordinal, d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count,
        static_cast<double>(d.memory_bytes) / (1ull << 30), cuda_version_string(d.cuda_driver_version).c_str(),
        cuda_version_string(d.cuda_runtime_version).c_str(), archs.c_str(), s.ok ? s.how.c_str() : "unsupported");
}

DeviceInfo check_cuda_device(int ordinal, const char* who) {
    const DeviceInfo d = query_device_info(ordinal);
    const std::vector<ArchTarget> archs = parse_cuda_architectures(built_cuda_architectures());
    if (!d.available) {
        // A driver too old for the runtime shows up here as cudaErrorInsufficientDriver: say so. (No
        // device is known, so nothing is said about its compute capability or the build's architectures.)
        const std::string driver = d.cuda_driver_version == 0
                                       ? std::string("no NVIDIA driver is installed")
                                       : driver_too_old(d.cuda_driver_version, d.cuda_runtime_version);
        SF_FAIL("%s needs a CUDA device: %s%s (the CPU reference backend runs with train.backend=cpu)", who,
                d.reason.c_str(), driver.empty() ? "" : ("; " + driver).c_str());
    }
    const DeviceSupport s =
        decide_device_support(d.cc_major * 10 + d.cc_minor, d.cuda_driver_version, d.cuda_runtime_version, archs);
    static std::once_flag once;
    std::call_once(once, [&] { SF_LOG_INFO("%s", device_report_line(d, s).c_str()); });
    SF_CHECK(s.ok, "%s: GPU %d (%s, compute capability %d.%d) is not supported: %s", who, ordinal, d.name.c_str(),
             d.cc_major, d.cc_minor, s.message.c_str());
    std::string why;
    SF_CUDA_CHECK(cudaSetDevice(ordinal));
    SF_CHECK(device_loads_kernels(&why),
             "%s: GPU %d (%s, compute capability %d.%d) cannot load this build's kernels (%s); rebuild for it: "
             "CMAKE_ARGS=-DCMAKE_CUDA_ARCHITECTURES=%d%d ./scripts/setup.sh",
             who, ordinal, d.name.c_str(), d.cc_major, d.cc_minor, why.c_str(), d.cc_major, d.cc_minor);
    return d;
}

}  // namespace rt
