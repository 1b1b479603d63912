// The suite runner's probe (tools/suite_runner.py; docs/GPU_VERIFICATION.md, "A suite that survives its
// failures"): one test of each way a test process can end badly, between tests that pass, so that the
// runner's handling of each is checked end to end: on the CPU under the emulation (ctest
// emu.suite_runner_probe, every case) and on a GPU (gpu_verify.sh's `tests` stage, the first three: a
// real kernel's illegal address loses the real context). Run alone, without SF_SUITE_PROBE=1, every
// test skips: the probe never breaks a process by accident.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "tests/support/test_record.h"
#if defined(SF_EMU)
#include "tests/emu/cuda_emu.h"  // sfemu::emulation_only
#include "tests/emu/streams.h"   // sfemu_lose_context
#endif

namespace {

bool probing() {
    const char* v = std::getenv("SF_SUITE_PROBE");
    return v && std::string(v) == "1";
}

#define SF_PROBE_ONLY() \
    if (!probing()) GTEST_SKIP() << "the suite runner's probe: runs only with SF_SUITE_PROBE=1"

__global__ void store_kernel(int* p, int v) { *p = v; }

// This binary links no test support library, whose static registration installs the record elsewhere.
const bool g_installed = (sftest::install_test_record(), true);
#if defined(SF_EMU)
// The project's kernel table (the sm_90 cubins' launch limits) has no record of the probe's kernel.
const bool g_emulation_only = (sfemu::emulation_only(reinterpret_cast<const void*>(&store_kernel)), true);
#endif

// One device round trip: allocate, launch, copy back.
void expect_device_works() {
    int* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, sizeof(int)), cudaSuccess);
    store_kernel<<<1, 1>>>(d, 7);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    int h = 0;
    ASSERT_EQ(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(h, 7);
    EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST(SuiteProbe, APasses) {
    SF_PROBE_ONLY();
    expect_device_works();
}

// A store to an address no allocation holds: on a GPU, cudaErrorIllegalAddress, sticky for the process.
// The emulation checks every access against its allocations and would stop the process instead, so
// there the fault is injected as the error CUDA leaves behind.
TEST(SuiteProbe, BLosesTheContext) {
    SF_PROBE_ONLY();
#if defined(SF_EMU)
    sfemu_lose_context(cudaErrorIllegalAddress);
#else
    store_kernel<<<1, 1>>>(reinterpret_cast<int*>(uintptr_t{16}), 1);
#endif
    (void)cudaDeviceSynchronize();  // the listener (tests/support/test_record.cpp) judges the context
}

TEST(SuiteProbe, CPassesInAFreshProcess) {
    SF_PROBE_ONLY();
    expect_device_works();
}

TEST(SuiteProbe, DCrashes) {
    SF_PROBE_ONLY();
    std::abort();
}

TEST(SuiteProbe, EPasses) {
    SF_PROBE_ONLY();
    expect_device_works();
}

TEST(SuiteProbe, FHangs) {
    SF_PROBE_ONLY();
    std::this_thread::sleep_for(std::chrono::seconds(120));
}

TEST(SuiteProbe, GFailsAndTheProcessGoesOn) {
    SF_PROBE_ONLY();
    ADD_FAILURE() << "a plain failure: the process goes on";
}

TEST(SuiteProbe, HPasses) {
    SF_PROBE_ONLY();
    expect_device_works();
}

}  // namespace
