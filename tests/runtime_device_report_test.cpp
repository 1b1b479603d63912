// The device support decision (runtime/device_report.h) with injected compute capabilities,
// driver/runtime versions and architecture lists, and the report line.
#include <gtest/gtest.h>

#include <string>

#include "runtime/device_report.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

const char* kDefault = "89-real;90-real;120-real;120-virtual";  // CMakeLists.txt's default

rt::DeviceSupport decide(int cc, const std::string& archs, int driver = 13000, int runtime = 13000) {
    return rt::decide_device_support(cc, driver, runtime, rt::parse_cuda_architectures(archs));
}

TEST(DeviceReport, ParsesCmakeArchitectureLists) {
    const auto t = rt::parse_cuda_architectures("89-real;90;120-virtual,90a-real");
    ASSERT_EQ(t.size(), 4u);
    EXPECT_EQ(t[0].cc, 89);
    EXPECT_TRUE(t[0].sass);
    EXPECT_FALSE(t[0].ptx);
    EXPECT_TRUE(t[1].sass && t[1].ptx);  // plain "90": SASS and PTX
    EXPECT_EQ(t[2].cc, 120);
    EXPECT_TRUE(!t[2].sass && t[2].ptx);
    EXPECT_TRUE(t[3].arch_specific && t[3].cc == 90);
    EXPECT_TRUE(rt::parse_cuda_architectures("native").empty());
    EXPECT_TRUE(rt::parse_cuda_architectures("all-major").empty());
    SF_EXPECT_ERROR(rt::parse_cuda_architectures("90-fake"), "90-fake", "-real, -virtual");
    SF_EXPECT_ERROR(rt::parse_cuda_architectures("sm_90"), "sm_90");
}

TEST(DeviceReport, DefaultSetRunsTheTargetGpusFromSass) {
    EXPECT_EQ(decide(89, kDefault).how, "sm_89 code");    // RTX 4090
    EXPECT_EQ(decide(90, kDefault).how, "sm_90 code");    // H100 / H200
    EXPECT_EQ(decide(120, kDefault).how, "sm_120 code");  // RTX 5090
    EXPECT_EQ(decide(121, kDefault).how, "sm_120 code");  // same major, newer minor: binary compatible
}

TEST(DeviceReport, NewerGpuRunsFromPtx) {
    const rt::DeviceSupport s = decide(130, kDefault);
    EXPECT_TRUE(s.ok) << s.message;
    EXPECT_EQ(s.how, "PTX compute_120 JIT-compiled by the driver");
}

TEST(DeviceReport, RefusesGpuWithoutCodeOrPtx) {
    // sm_86 (RTX 3090): the sm_89 SASS needs minor >= 9, the only PTX is for 12.0.
    const rt::DeviceSupport s = decide(86, kDefault);
    EXPECT_FALSE(s.ok);
    EXPECT_NE(s.message.find("sm_89, sm_90, sm_120 and PTX compute_120"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("-DCMAKE_CUDA_ARCHITECTURES=86"), std::string::npos) << s.message;
    // CI's 90-only build on an RTX 4090: "90" carries compute_90 PTX, which 8.9 cannot JIT.
    EXPECT_FALSE(decide(89, "90").ok);
    EXPECT_FALSE(decide(100, "90-real").ok);  // SASS does not cross majors
    EXPECT_TRUE(decide(100, "90").ok);        // ... PTX does
    EXPECT_FALSE(decide(100, "90a").ok);      // arch-specific PTX does not
    EXPECT_FALSE(decide(91, "90a-real").ok);  // arch-specific SASS only on 9.0
}

TEST(DeviceReport, RefusesBelowTheKernelsMinimum) {
    const rt::DeviceSupport s = decide(75, "75;89-real");
    EXPECT_FALSE(s.ok);
    EXPECT_NE(s.message.find("below 8.0"), std::string::npos) << s.message;
    EXPECT_TRUE(decide(80, "80").ok);
}

TEST(DeviceReport, DriverVersions) {
    // A 12.x driver cannot load the CUDA 13 runtime at all.
    const rt::DeviceSupport old = decide(90, kDefault, 12080, 13000);
    EXPECT_FALSE(old.ok);
    EXPECT_NE(old.message.find("driver supports CUDA 12.8"), std::string::npos) << old.message;
    // A 13.0 driver under a 13.1 runtime runs SASS (minor version compatibility) ...
    EXPECT_TRUE(decide(89, kDefault, 13000, 13010).ok);
    // ... but cannot JIT PTX that 13.1 wrote.
    const rt::DeviceSupport jit = decide(130, kDefault, 13000, 13010);
    EXPECT_FALSE(jit.ok);
    EXPECT_NE(jit.message.find("update the driver"), std::string::npos) << jit.message;
}

TEST(DeviceReport, NativeBuildIsTrusted) { EXPECT_TRUE(decide(86, "native").ok); }

TEST(DeviceReport, ReportLineNamesGpuCapabilityAndVersions) {
    rt::DeviceInfo d;
    d.available = true;
    d.ordinal = 0;
    d.name = "NVIDIA GeForce RTX 4090";
    d.cc_major = 8;
    d.cc_minor = 9;
    d.sm_count = 128;
    d.memory_bytes = 24ull << 30;
    d.cuda_driver_version = 13000;
    d.cuda_runtime_version = 13000;
    const std::string line = rt::device_report_line(d, decide(89, kDefault));
    for (const char* part : {"NVIDIA GeForce RTX 4090", "compute capability 8.9", "128 SMs", "24.0 GiB",
                             "driver CUDA 13.0", "runtime CUDA 13.0", "(sm_89 code)"})
        EXPECT_NE(line.find(part), std::string::npos) << part << " not in: " << line;
    // This binary names what it was built with (CMAKE_CUDA_ARCHITECTURES, never empty).
    EXPECT_FALSE(rt::built_cuda_architectures().empty());
    EXPECT_NO_THROW(rt::parse_cuda_architectures(rt::built_cuda_architectures()));
}

TEST(DeviceReport, CheckWithoutDeviceSaysWhoNeedsIt) {
    std::string why;
    if (rt::cuda_device_available(&why)) GTEST_SKIP() << "a CUDA device is present";
    SF_EXPECT_ERROR(rt::check_cuda_device(0, "bench step"), "bench step needs a CUDA device", "train.backend=cpu");
    // Without a device nothing is known about a compute capability: no architecture advice (it once said
    // "none of which runs on compute capability 8.0; rebuild for it" on machines without a GPU).
    try {
        rt::check_cuda_device(0, "bench step");
    } catch (const rt::Error& e) {
        const std::string m = e.what();
        EXPECT_EQ(m.find("compute capability"), std::string::npos) << m;
        EXPECT_EQ(m.find("CMAKE_CUDA_ARCHITECTURES"), std::string::npos) << m;
    }
}

}  // namespace
