// Grid executor of the CPU emulation (docs/EMULATION.md). Blocks run one after another (in the
// chosen order); the threads of a block run on fibers, one at a time, each until it reaches a
// barrier, a warp synchronisation or its end. Between those points the threads are resumed in the
// chosen order, so a result that depends on which thread runs first changes with SF_EMU_ORDER.
// __syncthreads waits for every live thread of the block; a shuffle waits only for the lanes of its
// mask in its own 32-lane warp.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tests/emu/emu_internal.h"
#include "tests/emu/fiber.h"

#if SFEMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace sfemu {

Registers* g_regs = nullptr;

namespace {

constexpr int kMaxThreads = 1024;          // per block (compute capability 9.0)
constexpr size_t kMaxShared = 48 << 10;    // static shared memory per block
constexpr size_t kStackBytes = 256 << 10;  // per thread; reserved, backed only where touched

enum class Wait : unsigned char { Ready, Block, Warp, Done };

struct Thread {
    Registers regs;
    Fiber fiber;
    Wait wait = Wait::Ready;
    int linear = 0;
    // The pending warp synchronisation (Wait::Warp): shuffle or __syncwarp.
    unsigned mask = 0;
    bool shuffle = false;
    Shfl kind = Shfl::Idx;
    int arg = 0, width = 32;
    uint64_t in = 0, out = 0;
};

struct SharedVar {
    const void* tag;
    void* p;
    size_t align;
};

// The block being run (one at a time).
struct Block {
    const char* kernel = nullptr;
    const KernelCall* call = nullptr;
    uint64_t launch = 0;
    std::vector<Thread> threads;
    std::vector<int> in_warp_op;  // per warp: lanes waiting in a warp operation
    int live = 0, at_barrier = 0;
    std::vector<SharedVar> shared;
    size_t shared_bytes = 0;
    Thread* cur = nullptr;
};
Block g_block;
uint64_t g_launches = 0;

// splitmix64: the same permutations on every platform and standard library.
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
};

void permutation(std::vector<int>& p, int n, const OrderSpec& o, Rng& rng) {
    p.resize(n);
    for (int i = 0; i < n; ++i) p[i] = o.order == Order::Reverse ? n - 1 - i : i;
    if (o.order != Order::Random) return;
    for (int i = n - 1; i > 0; --i) std::swap(p[i], p[rng.next() % static_cast<uint64_t>(i + 1)]);
}

StackPool& stacks() {
    static StackPool pool(kMaxThreads, kStackBytes);
    return pool;
}

void release_barrier() {
    for (Thread& t : g_block.threads)
        if (t.wait == Wait::Block) t.wait = Wait::Ready;
    g_block.at_barrier = 0;
}

int warp_size_of(int warp) {
    const int n = static_cast<int>(g_block.threads.size());
    return n - 32 * warp < 32 ? n - 32 * warp : 32;
}

// The lane the shuffle of lane l reads (its own when the source falls outside its width segment).
int source_lane(const Thread& t, int l) {
    const int seg = l & ~(t.width - 1);
    switch (t.kind) {
        case Shfl::Idx: return seg + (t.arg & (t.width - 1));
        case Shfl::Up: return l - t.arg < seg ? l : l - t.arg;
        case Shfl::Down: return l + t.arg >= seg + t.width ? l : l + t.arg;
        case Shfl::Xor: {
            const int s = l ^ t.arg;
            return s >= seg + t.width ? l : s;
        }
    }
    return l;
}

// Completes the warp synchronisation of `mask` in `warp` when every lane of it has arrived.
void try_complete_warp(int warp, unsigned mask) {
    Thread* lanes = &g_block.threads[32 * warp];
    for (int l = 0; l < 32; ++l) {
        if (!(mask >> l & 1u)) continue;
        const Thread& t = lanes[l];
        if (t.wait == Wait::Done)
            fatal("lane %d of warp %d exited while the lanes of mask 0x%08x wait for it", l, warp, mask);
        if (t.wait != Wait::Warp) return;  // not there yet
        if (t.mask != mask)
            fatal("lanes of warp %d synchronise with different masks (0x%08x, 0x%08x)", warp, mask, t.mask);
        if (t.shuffle != lanes[__builtin_ctz(mask)].shuffle || t.kind != lanes[__builtin_ctz(mask)].kind)
            fatal("lanes of warp %d meet at different warp operations (mask 0x%08x)", warp, mask);
    }
    for (int l = 0; l < 32; ++l) {
        if (!(mask >> l & 1u)) continue;
        Thread& t = lanes[l];
        if (t.shuffle) {
            const int s = source_lane(t, l);
            if (!(mask >> s & 1u))
                fatal("lane %d of warp %d shuffles from lane %d, which is not in the mask 0x%08x", l, warp, s, mask);
            t.out = lanes[s].in;
        }
    }
    for (int l = 0; l < 32; ++l)
        if (mask >> l & 1u) lanes[l].wait = Wait::Ready;
    g_block.in_warp_op[warp] -= __builtin_popcount(mask);
}

void thread_main(void* p) {
    Thread* t = static_cast<Thread*>(p);
    g_block.call->run_thread();
    t->wait = Wait::Done;
    --g_block.live;
    // Lanes waiting for this one in a warp operation can never complete.
    const int warp = t->linear / 32, lane = t->linear % 32;
    for (int l = 0; g_block.in_warp_op[warp] > 0 && l < warp_size_of(warp); ++l) {
        const Thread& o = g_block.threads[32 * warp + l];
        if (o.wait == Wait::Warp && (o.mask >> lane & 1u))
            fatal("exits while lane %d of its warp waits for it in a warp operation (mask 0x%08x)", l, o.mask);
    }
    // Exited threads count as arrived at __syncthreads (as on the GPU).
    if (g_block.live > 0 && g_block.at_barrier == g_block.live) release_barrier();
    fiber_exit(t->fiber);
}

void start_threads(const LaunchConfig& cfg, uint3 block_idx) {
    const int bx = cfg.block.x, by = cfg.block.y, n = bx * by * static_cast<int>(cfg.block.z);
    g_block.threads.resize(n);
    g_block.in_warp_op.assign((n + 31) / 32, 0);
    g_block.live = n;
    g_block.at_barrier = 0;
    for (int i = 0; i < n; ++i) {
        Thread& t = g_block.threads[i];
        t.regs.thread_idx = make_uint3(i % bx, i / bx % by, i / (bx * by));
        t.regs.block_idx = block_idx;
        t.regs.block_dim = cfg.block;
        t.regs.grid_dim = cfg.grid;
        t.wait = Wait::Ready;
        t.linear = i;
        fiber_start(t.fiber, stacks().stack(i), stacks().bytes(), &thread_main, &t);
    }
}

void free_shared() {
    for (const SharedVar& v : g_block.shared) ::operator delete(v.p, std::align_val_t(v.align));
    g_block.shared.clear();
    g_block.shared_bytes = 0;
}

[[noreturn]] void deadlock() {
    int barrier = 0, warp = 0, first_warp = -1;
    for (const Thread& t : g_block.threads) {
        barrier += t.wait == Wait::Block;
        if (t.wait == Wait::Warp && warp++ == 0) first_warp = t.linear;
    }
    g_block.cur = nullptr;
    fatal("deadlock: %d live threads, %d at __syncthreads, %d in warp operations (first: thread %d)", g_block.live,
          barrier, warp, first_warp);
}

void run_block(const LaunchConfig& cfg, uint3 block_idx, const OrderSpec& o, Rng& rng) {
    start_threads(cfg, block_idx);
    std::vector<int> perm;
    while (g_block.live > 0) {
        permutation(perm, static_cast<int>(g_block.threads.size()), o, rng);
        bool progressed = false;
        for (int i : perm) {
            Thread& t = g_block.threads[i];
            if (t.wait != Wait::Ready) continue;
            g_block.cur = &t;
            g_regs = &t.regs;
            fiber_resume(t.fiber);
            progressed = true;
        }
        g_block.cur = nullptr;
        g_regs = nullptr;
        if (!progressed) deadlock();
    }
    free_shared();
}

void run_blocks(const LaunchConfig& cfg, const OrderSpec& o) {
    const int gx = cfg.grid.x, gy = cfg.grid.y, blocks = gx * gy * static_cast<int>(cfg.grid.z);
    Rng rng{o.seed * 0x2545f4914f6cdd1dull + g_block.launch};
    std::vector<int> perm;
    permutation(perm, blocks, o, rng);
    for (int b : perm) run_block(cfg, make_uint3(b % gx, b / gx % gy, b / (gx * gy)), o, rng);
}

void yield_current() { fiber_yield(g_block.cur->fiber); }

Thread& current(const char* what) {
    if (!g_block.cur) fatal("%s called outside a kernel", what);
    return *g_block.cur;
}

#if SFEMU_ASAN
// AddressSanitizer's report names the source line; this adds which kernel, block and thread.
void on_sanitizer_death() {
    if (!g_block.cur) return;
    const Registers& r = g_block.cur->regs;
    std::fprintf(stderr,
                 "sfemu: the report above happened in kernel %s (launch %llu), block (%u,%u,%u), thread (%u,%u,%u)\n",
                 g_block.kernel, static_cast<unsigned long long>(g_block.launch), r.block_idx.x, r.block_idx.y,
                 r.block_idx.z, r.thread_idx.x, r.thread_idx.y, r.thread_idx.z);
}
const bool g_death_callback = (__sanitizer_set_death_callback(&on_sanitizer_death), true);
#endif

}  // namespace

void fatal(const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_block.cur) {
        const Registers& r = g_block.cur->regs;
        std::fprintf(stderr, "sfemu: kernel %s (launch %llu), block (%u,%u,%u), thread (%u,%u,%u): %s\n",
                     g_block.kernel, static_cast<unsigned long long>(g_block.launch), r.block_idx.x, r.block_idx.y,
                     r.block_idx.z, r.thread_idx.x, r.thread_idx.y, r.thread_idx.z, msg);
    } else if (g_block.kernel) {
        std::fprintf(stderr, "sfemu: kernel %s (launch %llu): %s\n", g_block.kernel,
                     static_cast<unsigned long long>(g_block.launch), msg);
    } else {
        std::fprintf(stderr, "sfemu: %s\n", msg);
    }
    std::fflush(stderr);
    std::abort();
}

std::string check_config(const LaunchConfig& c) {
    const unsigned long long threads = 1ull * c.block.x * c.block.y * c.block.z;
    if (threads == 0 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0) return "a zero grid or block dimension";
    if (threads > kMaxThreads || c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64)
        return "more than 1024 threads per block (or block.y > 1024, block.z > 64)";
    if (c.grid.x > 0x7fffffffu || c.grid.y > 65535 || c.grid.z > 65535) return "grid beyond 2^31-1 x 65535 x 65535";
    if (c.smem != 0) return "dynamic shared memory is not emulated";
    return "";
}

void run_grid(const char* name, const LaunchConfig& cfg, const KernelCall& call) {
    g_block.kernel = name;
    g_block.call = &call;
    g_block.launch = ++g_launches;
    const std::vector<OrderSpec>& os = orders();
    if (os.size() == 1) {
        run_blocks(cfg, os[0]);
    } else {
        // The same launch from the same memory in every order: any difference is a race.
        static Snapshot before, first;
        snapshot_device(before);
        run_blocks(cfg, os[0]);
        snapshot_device(first);
        for (size_t k = 1; k < os.size(); ++k) {
            restore(before);
            run_blocks(cfg, os[k]);
            const std::string diff = compare_device(first);
            if (!diff.empty())
                fatal("the result depends on the thread order (%s vs %s): %s", order_name(os[0]).c_str(),
                      order_name(os[k]).c_str(), diff.c_str());
        }
    }
    g_block.kernel = nullptr;
    g_block.call = nullptr;
}

void sync_block() {
    Thread& t = current("__syncthreads");
    t.wait = Wait::Block;
    if (++g_block.at_barrier == g_block.live) release_barrier();
    yield_current();
}

static uint64_t warp_op(unsigned mask, bool shuffle, uint64_t bits, Shfl kind, int arg, int width) {
    Thread& t = current(shuffle ? "a warp shuffle" : "__syncwarp");
    const int warp = t.linear / 32, lane = t.linear % 32;
    if (!(mask >> lane & 1u)) fatal("lane %d calls a warp operation with a mask without itself (0x%08x)", lane, mask);
    const int lanes = warp_size_of(warp);
    if (lanes < 32 && (mask >> lanes) != 0)
        fatal("mask 0x%08x names lanes beyond the %d threads of warp %d", mask, lanes, warp);
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
        fatal("shuffle width %d is not a power of 2 <= 32", width);
    t.wait = Wait::Warp;
    t.mask = mask;
    t.shuffle = shuffle;
    t.kind = kind;
    t.arg = arg;
    t.width = width;
    t.in = bits;
    // Only the arrival that can complete the group looks at every lane (O(32) once, not per lane).
    if (++g_block.in_warp_op[warp] >= __builtin_popcount(mask)) try_complete_warp(warp, mask);
    yield_current();
    return t.out;
}

void sync_warp(unsigned mask) { warp_op(mask, false, 0, Shfl::Idx, 0, 32); }

uint64_t shuffle(unsigned mask, uint64_t bits, Shfl kind, int arg, int width) {
    return warp_op(mask, true, bits, kind, arg, width);
}

void* shared_alloc(const void* tag, size_t bytes, size_t align, bool* fresh) {
    current("__shared__");
    *fresh = false;
    for (const SharedVar& v : g_block.shared)
        if (v.tag == tag) return v.p;
    *fresh = true;
    g_block.shared_bytes += bytes;
    if (g_block.shared_bytes > kMaxShared)
        fatal("%zu bytes of static shared memory exceed the 48 KiB of a block", g_block.shared_bytes);
    void* p = ::operator new(bytes, std::align_val_t(align));
    std::memset(p, kPoison, bytes);  // a read before any thread wrote it shows as NaN / -1
    g_block.shared.push_back(SharedVar{tag, p, align});
    return p;
}

// ---- orders ----

std::string order_name(const OrderSpec& o) {
    if (o.order == Order::Forward) return "forward";
    if (o.order == Order::Reverse) return "reverse";
    return "random:" + std::to_string(o.seed);
}

const std::vector<OrderSpec>& orders() {
    static const std::vector<OrderSpec> parsed = [] {
        std::vector<OrderSpec> out;
        const char* env = std::getenv("SF_EMU_ORDER");
        std::string s = env && *env ? env : "forward";
        size_t pos = 0;
        while (pos <= s.size()) {
            const size_t comma = std::min(s.find(',', pos), s.size());
            const std::string item = s.substr(pos, comma - pos);
            OrderSpec o;
            if (item == "forward") {
                o.order = Order::Forward;
            } else if (item == "reverse") {
                o.order = Order::Reverse;
            } else if (item.rfind("random", 0) == 0 && (item.size() == 6 || item[6] == ':')) {
                o.order = Order::Random;
                if (item.size() > 7) o.seed = std::strtoull(item.c_str() + 7, nullptr, 10);
            } else {
                fatal("SF_EMU_ORDER='%s': '%s' is none of forward, reverse, random[:seed]", s.c_str(), item.c_str());
            }
            out.push_back(o);
            pos = comma + 1;
        }
        return out;
    }();
    return parsed;
}

}  // namespace sfemu
