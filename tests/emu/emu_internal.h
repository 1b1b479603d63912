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

// Prints "sfemu: <message>" with the running kernel, block and thread (if any) and aborts: a
// defect the emulation found inside a kernel has no CUDA error code to travel in.
[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// ---- device memory (memory.cpp) ----

constexpr unsigned char kPoison = 0xff;  // NaN as fp32, fp64 and bf16; -1 as an integer

struct Allocation {
    char* base;
    size_t bytes;
    bool device;  // cudaMalloc (true) or pinned host memory (cudaMallocHost)
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
