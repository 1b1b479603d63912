// Tests of the CPU emulation itself (docs/EMULATION.md): the semantics the kernels rely on, and
// that each defect class the emulation exists for is caught (death tests): a race between warps,
// a read past an allocation, a shuffle waiting for an exited lane, a deadlock. Built only into
// the emulation (tests/emu/CMakeLists.txt); the kernels are rewritten like the project's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda_check.h"
#include "tests/emu/emu_internal.h"

namespace {

// The two-stage block sum of kernels/adamw.cu (warp shuffles, then warp 0 over the warp sums),
// one result per block.
__global__ void block_sums_kernel(const float* x, float* out) {
    __shared__ float warp_sums[8];
    float s = x[blockIdx.x * blockDim.x + threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) out[blockIdx.x] = s;
    }
}

// out[lane] per variant: idx from lane 3, up by 1, down by 2, xor 1, all with width 16.
__global__ void shuffle_variants_kernel(int* out) {
    const int l = threadIdx.x;
    out[l] = __shfl_sync(0xffffffffu, l, 3, 16);
    out[32 + l] = __shfl_up_sync(0xffffffffu, l, 1, 16);
    out[64 + l] = __shfl_down_sync(0xffffffffu, l, 2, 16);
    out[96 + l] = __shfl_xor_sync(0xffffffffu, l, 1, 16);
}

// Missing __syncthreads between the write and the read of a neighbour's slot: a race.
__global__ void racy_kernel(float* out) {
    __shared__ float slot[64];
    slot[threadIdx.x] = static_cast<float>(threadIdx.x);
    out[threadIdx.x] = slot[(threadIdx.x + 32) % 64];
}

__global__ void copy_kernel(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) y[i] = x[i];  // off by one: i == n reads and writes past the end
}

__global__ void early_exit_shuffle_kernel(float* out) {
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void deadlock_kernel(float* out) {
    if (threadIdx.x < 16) {
        out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);  // lanes 16..31 never come
    } else {
        __syncthreads();
    }
}

__global__ void read_kernel(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x]; }
__global__ void unlisted_kernel(float* y) { y[threadIdx.x] = 0; }

// These kernels exist only in the emulation: no sm_90 build to check their launches against
// (unlisted_kernel is left out on purpose: the test of a kernel the table lacks).
const bool g_emulation_only = [] {
    for (const void* k :
         {reinterpret_cast<const void*>(block_sums_kernel), reinterpret_cast<const void*>(shuffle_variants_kernel),
          reinterpret_cast<const void*>(racy_kernel), reinterpret_cast<const void*>(copy_kernel),
          reinterpret_cast<const void*>(early_exit_shuffle_kernel), reinterpret_cast<const void*>(deadlock_kernel),
          reinterpret_cast<const void*>(read_kernel)})
        sfemu::emulation_only(k);
    return true;
}();

template <class T>
T* device_alloc(size_t n) {
    void* p = nullptr;
    SF_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    return static_cast<T*>(p);
}

template <class T>
std::vector<T> fetch(const T* p, size_t n) {
    std::vector<T> h(n);
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    SF_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

TEST(Emulation, TwoStageBlockSumsAreExactInEveryBlock) {
    const int blocks = 5, threads = 256;
    std::vector<float> x(blocks * threads);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7);
    float* dx = device_alloc<float>(x.size());
    float* dy = device_alloc<float>(blocks);
    SF_CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    block_sums_kernel<<<blocks, threads>>>(dx, dy);
    SF_CUDA_CHECK(cudaGetLastError());
    const std::vector<float> got = fetch(dy, blocks);
    for (int b = 0; b < blocks; ++b) {
        float want = 0;
        for (int t = 0; t < threads; ++t) want += x[b * threads + t];
        EXPECT_EQ(got[b], want) << "block " << b;
    }
    cudaFree(dx);
    cudaFree(dy);
}

TEST(Emulation, ShuffleVariantsFollowCuda) {
    int* d = device_alloc<int>(128);
    shuffle_variants_kernel<<<1, 32>>>(d);
    const std::vector<int> got = fetch(d, 128);
    for (int l = 0; l < 32; ++l) {
        const int seg = l / 16 * 16;
        EXPECT_EQ(got[l], seg + 3) << l;
        EXPECT_EQ(got[32 + l], l % 16 >= 1 ? l - 1 : l) << l;
        EXPECT_EQ(got[64 + l], l % 16 + 2 < 16 ? l + 2 : l) << l;
        EXPECT_EQ(got[96 + l], l ^ 1) << l;
    }
    cudaFree(d);
}

TEST(Emulation, DeviceMemoryStartsPoisoned) {
    float* x = device_alloc<float>(32);
    float* y = device_alloc<float>(32);
    read_kernel<<<1, 32>>>(x, y);
    const std::vector<float> got = fetch(y, 32);
    uint32_t bits;
    std::memcpy(&bits, &got[0], 4);
    EXPECT_EQ(bits, 0xffffffffu);
    cudaFree(x);
    cudaFree(y);
}

TEST(Emulation, BadLaunchConfigurationIsAnError) {
    float* y = device_alloc<float>(1);
    read_kernel<<<1, 2048>>>(y, y);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    cudaFree(y);
}

// The hardware's per-block register check (cuda_occupancy.h): per-warp units of 256 registers, the
// block's warps rounded up to a multiple of 4; 255 registers per thread at most.
TEST(EmulationLaunchResources, LargestBlockByRegisters) {
    const int cases[][2] = {{0, 1024}, {32, 1024}, {64, 1024}, {65, 896},  {72, 896},  {80, 768},
                            {96, 640}, {128, 512}, {168, 384}, {170, 256}, {255, 256}, {256, 0}};
    for (const auto& c : cases) EXPECT_EQ(sfemu::max_block_threads(c[0]), c[1]) << c[0] << " registers";
}

// The launch census's theoretical occupancy on an sm_90 SM (64 warps, 32 blocks, 4 x 16,384
// registers, 228 KiB of shared memory with 1 KiB reserved per block).
TEST(EmulationLaunchResources, OccupancyAndItsLimit) {
    sfemu::KernelLimits k;
    k.regs = 206;  // 208 x 32 = 6,656 per warp: 2 warps per sub-partition, 8 per SM
    sfemu::Occupancy o = sfemu::occupancy(k, 128);
    EXPECT_EQ(o.blocks, 2);
    EXPECT_DOUBLE_EQ(o.warps_share, 0.125);
    EXPECT_STREQ(o.limit, "registers");
    k.regs = 32;
    o = sfemu::occupancy(k, 256);
    EXPECT_EQ(o.blocks, 8);
    EXPECT_DOUBLE_EQ(o.warps_share, 1.0);
    EXPECT_STREQ(o.limit, "warps");
    o = sfemu::occupancy(k, 32);
    EXPECT_EQ(o.blocks, 32);
    EXPECT_DOUBLE_EQ(o.warps_share, 0.5);
    EXPECT_STREQ(o.limit, "blocks");
    k.smem = 43520;  // + 1 KiB reserved: 5 blocks in 228 KiB
    o = sfemu::occupancy(k, 128);
    EXPECT_EQ(o.blocks, 5);
    EXPECT_STREQ(o.limit, "shared memory");
}

// A table naming two of this file's kernels (by the symbols the host compiler gives them, as
// tools/cubin_resources.py writes nvcc's): a block the registers or the launch bound cannot hold is
// refused with the GPU's error, and cudaFuncGetAttributes reports the table's figures.
TEST(EmulationLaunchResources, ABlockTheSm90BuildCannotHoldIsRefused) {
    const std::string saved = sfemu::kernel_table_path();
    const std::string path = ::testing::TempDir() + "emu_selftest_kernels.tsv";
    {
        std::ofstream f(path);
        f << "# regs smem stack bound max_threads\n"
          << "_ZN12_GLOBAL__N_111read_kernelEPKfPf\t128\t0\t0\t0\t512\n"
          << "_ZN12_GLOBAL__N_111copy_kernelEPKfPfi\t16\t4096\t8\t256\t256\n";
    }
    sfemu::set_kernel_table(path);
    float* y = device_alloc<float>(1024);
    read_kernel<<<1, 512>>>(y, y);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    read_kernel<<<1, 544>>>(y, y);
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
    read_kernel<<<dim3(1), dim3(32, 17)>>>(y, y);  // 544 threads in two dimensions
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
    copy_kernel<<<1, 256>>>(y, y, 1);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    copy_kernel<<<1, 288>>>(y, y, 1);  // 16 registers fit 1024 threads; the bound is 256
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
    cudaFuncAttributes a{};
    SF_CUDA_CHECK(cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(read_kernel)));
    EXPECT_EQ(a.numRegs, 128);
    EXPECT_EQ(a.maxThreadsPerBlock, 512);
    SF_CUDA_CHECK(cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(copy_kernel)));
    EXPECT_EQ(a.maxThreadsPerBlock, 256);
    EXPECT_EQ(a.sharedSizeBytes, 4096u);
    EXPECT_EQ(a.localSizeBytes, 8u);
    // The census (SF_EMU_LAUNCH_CENSUS) counts launches per block size, refused ones included.
    const std::string census = ::testing::TempDir() + "emu_selftest_census.tsv";
    setenv("SF_EMU_LAUNCH_CENSUS", census.c_str(), 1);
    read_kernel<<<1, 64>>>(y, y);
    read_kernel<<<2, 64>>>(y, y);
    read_kernel<<<1, 32>>>(y, y);
    unsetenv("SF_EMU_LAUNCH_CENSUS");
    read_kernel<<<1, 32>>>(y, y);  // not counted
    sfemu::write_launch_census(census);
    std::ifstream in(census);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(all.find("32\t1\t128\t0\t0\t0\t16\t0.250\tregisters\t(anonymous namespace)::read_kernel(float const*, "
                       "float*)\n"),
              std::string::npos)
        << all;
    EXPECT_NE(all.find("64\t2\t128\t0\t0\t0\t8\t0.250\tregisters\t(anonymous namespace)::read_kernel"),
              std::string::npos)
        << all;
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    cudaFree(y);
    sfemu::set_kernel_table(saved);
}

// With a table in use, a kernel it lacks (and not registered as emulation-only) stops the test: a
// launch nothing could be checked against would pass silently otherwise.
TEST(EmulationLaunchResourcesDeathTest, AKernelTheTableLacksIsFatal) {
    const std::string path = ::testing::TempDir() + "emu_selftest_kernels_one.tsv";
    {
        std::ofstream f(path);
        f << "_ZN12_GLOBAL__N_111read_kernelEPKfPf\t16\t0\t0\t0\t1024\n";
    }
    float* y = device_alloc<float>(32);
    EXPECT_DEATH(
        {
            sfemu::set_kernel_table(path);
            unlisted_kernel<<<1, 32>>>(y);
        },
        "unlisted_kernel \\(symbol _ZN12_GLOBAL__N_115unlisted_kernelEPf\\) has no record in the sm_90 kernel table");
    cudaFree(y);
}

TEST(Emulation, StreamWorkRunsOnlyWhenWaitedFor) {
    cudaStream_t s;
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float* d = device_alloc<float>(1);
    const float one = 1.0f;
    SF_CUDA_CHECK(cudaMemcpyAsync(d, &one, sizeof(float), cudaMemcpyHostToDevice, s));
    float got = 0;
    SF_CUDA_CHECK(cudaMemcpy(&got, d, sizeof(float), cudaMemcpyDeviceToHost));  // legacy: no wait for s
    EXPECT_NE(got, 1.0f);
    SF_CUDA_CHECK(cudaStreamSynchronize(s));
    SF_CUDA_CHECK(cudaMemcpy(&got, d, sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, 1.0f);
    // Synchronising inside a capture breaks it.
    SF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    cudaFree(d);
    SF_CUDA_CHECK(cudaStreamDestroy(s));
}

// A captured graph has one node per operation: kernels, copies and memsets by type; event records and
// waits of the capture are edges, not nodes (as in CUDA). The count query and the fill follow CUDA's
// contract (null array: the count; a larger array: null-padded, the count obtained returned).
TEST(Emulation, GraphNodesByType) {
    cudaStream_t s;
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float* x = device_alloc<float>(32);
    float* y = device_alloc<float>(32);
    cudaEvent_t e;
    SF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    SF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    SF_CUDA_CHECK(cudaMemsetAsync(x, 0, 32 * sizeof(float), s));
    read_kernel<<<1, 32, 0, s>>>(x, y);
    SF_CUDA_CHECK(cudaEventRecord(e, s));
    SF_CUDA_CHECK(cudaStreamWaitEvent(s, e, 0));
    read_kernel<<<1, 32, 0, s>>>(y, x);
    SF_CUDA_CHECK(cudaMemcpyAsync(y, x, 32 * sizeof(float), cudaMemcpyDeviceToDevice, s));
    cudaGraph_t g = nullptr;
    SF_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    size_t n = 0;
    SF_CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &n));
    ASSERT_EQ(n, 4u);
    std::vector<cudaGraphNode_t> nodes(6, reinterpret_cast<cudaGraphNode_t>(1));
    size_t want = nodes.size();
    SF_CUDA_CHECK(cudaGraphGetNodes(g, nodes.data(), &want));
    EXPECT_EQ(want, 4u);
    EXPECT_EQ(nodes[4], nullptr);
    EXPECT_EQ(nodes[5], nullptr);
    int kernels = 0, memcpys = 0, memsets = 0;
    for (size_t i = 0; i < 4; ++i) {
        cudaGraphNodeType t;
        SF_CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &t));
        kernels += t == cudaGraphNodeTypeKernel;
        memcpys += t == cudaGraphNodeTypeMemcpy;
        memsets += t == cudaGraphNodeTypeMemset;
    }
    EXPECT_EQ(kernels, 2);
    EXPECT_EQ(memcpys, 1);
    EXPECT_EQ(memsets, 1);
    EXPECT_EQ(cudaGraphGetNodes(g, nullptr, nullptr), cudaErrorInvalidValue);
    cudaGetLastError();
    SF_CUDA_CHECK(cudaGraphDestroy(g));
    SF_CUDA_CHECK(cudaEventDestroy(e));
    cudaFree(x);
    cudaFree(y);
    SF_CUDA_CHECK(cudaStreamDestroy(s));
}

// Cross-stream capture (tests/emu/streams.cpp, graphs.cpp): side streams that wait for an event recorded in the
// capture join it, their work depends on the fork point and the origin's work after the join on theirs;
// ending it with a side stream not joined back fails. The replay interleaves the chains, so two branches
// sharing a buffer they should not (b overwrites `shared` between a's write and read) corrupt each other,
// which a replay in capture order (SF_EMU_GRAPH_ORDER=capture) does not show: the race is visible.
TEST(Emulation, CrossStreamCaptureReplaysBranchesInterleaved) {
    cudaStream_t main_s, a, b;
    for (cudaStream_t* st : {&main_s, &a, &b}) SF_CUDA_CHECK(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking));
    cudaEvent_t fork, ja, jb;
    for (cudaEvent_t* e : {&fork, &ja, &jb}) SF_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    // src: 5, 1, 2; then shared, outa0, outa, outb, final.
    float* d = device_alloc<float>(8);
    const float init[3] = {5.0f, 1.0f, 2.0f};
    SF_CUDA_CHECK(cudaMemcpy(d, init, sizeof(init), cudaMemcpyHostToDevice));
    float *shared = d + 3, *outa0 = d + 4, *outa = d + 5, *outb = d + 6, *final_v = d + 7;
    auto copy = [](float* dst, const float* src, cudaStream_t st) {
        SF_CUDA_CHECK(cudaMemcpyAsync(dst, src, sizeof(float), cudaMemcpyDeviceToDevice, st));
    };
    auto capture = [&](bool join_b) {
        SF_CUDA_CHECK(cudaStreamBeginCapture(main_s, cudaStreamCaptureModeThreadLocal));
        copy(shared, d, main_s);  // 5
        SF_CUDA_CHECK(cudaEventRecord(fork, main_s));
        SF_CUDA_CHECK(cudaStreamWaitEvent(a, fork, 0));
        SF_CUDA_CHECK(cudaStreamWaitEvent(b, fork, 0));
        copy(outa0, shared, a);  // 5: after the fork point
        copy(shared, d + 1, a);
        copy(outa, shared, a);  // 1, unless b wrote shared in between
        copy(shared, d + 2, b);
        copy(outb, shared, b);  // 2, unless a wrote shared in between
        SF_CUDA_CHECK(cudaEventRecord(ja, a));
        SF_CUDA_CHECK(cudaStreamWaitEvent(main_s, ja, 0));
        if (join_b) {
            SF_CUDA_CHECK(cudaEventRecord(jb, b));
            SF_CUDA_CHECK(cudaStreamWaitEvent(main_s, jb, 0));
        }
        copy(final_v, outa, main_s);  // after a's last copy
        cudaGraph_t g = nullptr;
        const cudaError_t err = cudaStreamEndCapture(main_s, &g);
        cudaGetLastError();
        return std::make_pair(err, g);
    };
    const auto unjoined = capture(false);
    EXPECT_EQ(unjoined.first, cudaErrorStreamCaptureUnjoined);
    EXPECT_EQ(unjoined.second, nullptr);
    cudaStreamCaptureStatus st;
    SF_CUDA_CHECK(cudaStreamIsCapturing(b, &st));
    EXPECT_EQ(st, cudaStreamCaptureStatusNone);  // the ended capture released its side streams
    const auto joined = capture(true);
    ASSERT_EQ(joined.first, cudaSuccess);
    cudaGraph_t g = joined.second;
    size_t nodes = 0, edges = 0;
    SF_CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
    SF_CUDA_CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
    EXPECT_EQ(nodes, 7u);
    EXPECT_EQ(edges, 8u);  // a's and b's first on the fork point, the chains, main's last on a, b and main
    auto replay = [&](const char* order) {
        if (order)
            setenv("SF_EMU_GRAPH_ORDER", order, 1);
        else
            unsetenv("SF_EMU_GRAPH_ORDER");
        cudaGraphExec_t x = nullptr;
        SF_CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
        unsetenv("SF_EMU_GRAPH_ORDER");
        SF_CUDA_CHECK(cudaMemsetAsync(d + 3, 0, 5 * sizeof(float), main_s));
        SF_CUDA_CHECK(cudaGraphLaunch(x, main_s));
        SF_CUDA_CHECK(cudaStreamSynchronize(main_s));
        SF_CUDA_CHECK(cudaGraphExecDestroy(x));
        return fetch(d + 4, 4);  // outa0, outa, outb, final
    };
    const std::vector<float> in_order = replay("capture"), interleaved = replay(nullptr);
    EXPECT_EQ(in_order, (std::vector<float>{5, 1, 2, 1}));
    EXPECT_EQ(interleaved[0], 5.0f);            // the fork point came first
    EXPECT_EQ(interleaved[3], interleaved[1]);  // the join waited for a
    EXPECT_NE(interleaved, in_order);           // the shared buffer's race shows
    SF_CUDA_CHECK(cudaGraphDestroy(g));
    for (cudaEvent_t e : {fork, ja, jb}) SF_CUDA_CHECK(cudaEventDestroy(e));
    for (cudaStream_t x : {main_s, a, b}) SF_CUDA_CHECK(cudaStreamDestroy(x));
    cudaFree(d);
}

using EmulationDeathTest = ::testing::Test;

TEST_F(EmulationDeathTest, RaceBetweenWarpsIsReported) {
    if (sfemu::orders().size() < 2) GTEST_SKIP() << "needs two thread orders (SF_EMU_ORDER=forward,reverse)";
    float* y = device_alloc<float>(64);
    EXPECT_DEATH(
        {
            racy_kernel<<<1, 64>>>(y);
            cudaDeviceSynchronize();
        },
        "depends on the thread order");
    cudaFree(y);
}

TEST_F(EmulationDeathTest, OutOfBoundsAccessIsReportedWithTheKernel) {
    float* x = device_alloc<float>(100);
    float* y = device_alloc<float>(100);
    EXPECT_DEATH(
        {
            copy_kernel<<<1, 128>>>(x, y, 100);
            cudaDeviceSynchronize();
        },
        "heap-buffer-overflow.*in kernel copy_kernel");
    cudaFree(x);
    cudaFree(y);
}

TEST_F(EmulationDeathTest, ShuffleWithAnExitedLaneIsReported) {
    float* y = device_alloc<float>(32);
    EXPECT_DEATH(
        {
            early_exit_shuffle_kernel<<<1, 32>>>(y);
            cudaDeviceSynchronize();
        },
        "exit");
    cudaFree(y);
}

TEST_F(EmulationDeathTest, DeadlockIsReported) {
    float* y = device_alloc<float>(32);
    EXPECT_DEATH(
        {
            deadlock_kernel<<<1, 32>>>(y);
            cudaDeviceSynchronize();
        },
        "deadlock");
    cudaFree(y);
}

}  // namespace
