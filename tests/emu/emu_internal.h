// Internal interface between the parts of the CPU emulation (tests/emu): the grid executor
// (engine.cpp), the device memory registry (memory.cpp) and the stream/event/graph runtime
// (runtime.cpp). Not included by emulated sources; those see tests/emu/cuda_emu.h only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/emu/cuda_emu.h"

namespace sfemu {

// ---- thread and block order (SF_EMU_ORDER) ----

// forward: threads (and blocks) by increasing index; reverse: decreasing; random: a fresh seeded
// permutation for every block and every stretch between barriers.
enum class Order { Forward, Reverse, Random };
struct OrderSpec {
    Order order = Order::Forward;
    uint64_t seed = 1;
};
std::string order_name(const OrderSpec& o);
// SF_EMU_ORDER="forward" | "reverse" | "random[:seed]", or a comma-separated list: every launch then
// runs once per order from the same device memory and the results must agree bitwise.
const std::vector<OrderSpec>& orders();

// ---- grids ----

// Runs every block of the grid to completion (engine.cpp); called when the launch reaches the
// head of its stream.
void run_grid(const char* name, const LaunchConfig& cfg, const KernelCall& call);
// "" when cfg is a valid launch, else why not (the limits of compute capability 9.0).
std::string check_config(const LaunchConfig& cfg);

// ---- launch resources (kernel_table.cpp; docs/EMULATION.md, "Launch resources") ----

// What the sm_90 build of a kernel needs (tools/cubin_resources.py's table).
struct KernelLimits {
    int regs = 0, smem = 0, stack = 0;  // registers per thread, static shared bytes, stack bytes per thread
    int bound = 0;                      // __launch_bounds__ maximum, 0: none
    int max_threads = 0;                // the largest block that fits (1024, the bound, the registers)
};
// The largest block a kernel with `regs` registers per thread can launch: the hardware's per-block
// register check as cuda_occupancy.h models it (per-warp units of 256, warps rounded up to 4).
int max_block_threads(int regs);
// The kernel's limits, null when unknown or when no table is in use; *symbol: its mangled name.
const KernelLimits* kernel_limits(const void* kernel, std::string* symbol = nullptr);
// "" when a block of cfg fits the kernel's sm_90 build, else why not (cudaErrorLaunchOutOfResources
// on a GPU). A kernel the table lacks is fatal unless registered with sfemu::emulation_only.
std::string check_resources(const char* name, const LaunchConfig& cfg, const void* kernel);
// The theoretical occupancy of a kernel's blocks of `threads` threads on an sm_90 SM: resident
// blocks, their share of the SM's 64 warps, and what limits them (warps, blocks, registers, shared memory).
struct Occupancy {
    int blocks;
    double warps_share;
    const char* limit;
};
Occupancy occupancy(const KernelLimits& k, int threads);
// Writes the launches recorded so far (with SF_EMU_LAUNCH_CENSUS set; at the process's end to that
// file): per kernel and block size, the launches, the sm_90 figures and the occupancy, as TSV.
void write_launch_census(const std::string& path);
// The table in use: SF_EMU_KERNEL_TABLE if set (empty: none), else the build's (SFEMU_KERNEL_TABLE).
std::string kernel_table_path();

// Prints "sfemu: <message>" with the running kernel, block and thread (if any) and aborts: a
// defect the emulation found inside a kernel has no CUDA error code to travel in.
[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// ---- device memory (memory.cpp) ----

constexpr unsigned char kPoison = 0xff;  // NaN as fp32, fp64 and bf16; -1 as an integer

struct Allocation {
    char* base;
    size_t bytes;
    bool device;          // cudaMalloc (true) or pinned host memory (cudaMallocHost)
    bool mapped = false;  // launch-only mode's device memory: zero pages from mmap, released by munmap
};
// The allocation holding [p, p + bytes), or null.
const Allocation* find_allocation(const void* p, size_t bytes = 1);
void* allocate(size_t bytes, bool device);
bool release(void* p, bool device);  // false: p is not such an allocation
size_t device_bytes_in_use();

// Copies of every device allocation, for the order comparison of a launch (buffers reused from
// one snapshot to the next).
struct Snapshot {
    std::vector<std::pair<const Allocation*, std::vector<char>>> parts;
};
void snapshot_device(Snapshot& s);
void restore(const Snapshot& s);
// "" when the device memory equals s byte for byte, else the first difference.
std::string compare_device(const Snapshot& s);

}  // namespace sfemu
