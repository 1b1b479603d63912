// Launch resources of the CPU emulation (docs/EMULATION.md, "Launch resources"): every launch is
// checked against what the real sm_90 build of the same kernel needs. The table is written at build
// time by tools/cubin_resources.py from the sm_90 cubins of the project's libraries (registers,
// static shared memory, stack, __launch_bounds__); a kernel is found by its symbol: the emulated
// kernel is a host function of the same name and signature, so its mangled name (read from this
// executable's ELF symbol table) is nvcc's, up to the name nvcc gives anonymous namespaces, which the
// table spells as host compilers do (`12_GLOBAL__N_1`).
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "tests/emu/emu_internal.h"

#ifndef SFEMU_KERNEL_TABLE
#define SFEMU_KERNEL_TABLE ""
#endif

namespace sfemu {

namespace {

constexpr int kRegsPerBlock = 65536, kRegUnit = 256, kSubPartitions = 4, kMaxBlock = 1024;

struct Table {
    std::string path;  // "" when launches are not checked
    std::unordered_map<std::string, KernelLimits> kernels;
};

Table load_table(const std::string& path) {
    Table t;
    t.path = path;
    if (path.empty()) return t;
    std::ifstream in(path);
    if (!in) fatal("the sm_90 kernel table %s cannot be read (SF_EMU_KERNEL_TABLE=\"\" runs unchecked)", path.c_str());
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream f(line);
        std::string name;
        KernelLimits k{};
        if (!(f >> name >> k.regs >> k.smem >> k.stack >> k.bound >> k.max_threads))
            fatal("malformed line in the kernel table %s: %s", path.c_str(), line.c_str());
        t.kernels[name] = k;
    }
    if (t.kernels.empty()) fatal("the kernel table %s lists no kernel", path.c_str());
    return t;
}

// The function symbols of one ELF file (.symtab, falling back to .dynsym), by value.
std::map<uint64_t, std::string> read_symbols(const char* file) {
    std::map<uint64_t, std::string> out;
    std::ifstream in(file, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (data.size() < sizeof(Elf64_Ehdr) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0) return out;
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data.data());
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(data.data() + eh->e_shoff);
    for (const unsigned want : {SHT_SYMTAB, SHT_DYNSYM}) {
        for (int k = 0; k < eh->e_shnum; ++k) {
            if (sh[k].sh_type != want) continue;
            const char* names = data.data() + sh[sh[k].sh_link].sh_offset;
            const auto* sym = reinterpret_cast<const Elf64_Sym*>(data.data() + sh[k].sh_offset);
            for (size_t s = 0; s < sh[k].sh_size / sizeof(Elf64_Sym); ++s)
                if (ELF64_ST_TYPE(sym[s].st_info) == STT_FUNC && sym[s].st_value && sym[s].st_name)
                    out.emplace(sym[s].st_value, names + sym[s].st_name);
        }
        if (!out.empty()) break;
    }
    return out;
}

// The mangled name of the function at p ("" when no symbol has that address); files: the symbols
// read so far, per ELF file.
std::string symbol_of(const void* p, std::map<std::string, std::map<uint64_t, std::string>>& files) {
    Dl_info info{};
    link_map* lm = nullptr;
    if (!dladdr1(p, &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) || !lm) return "";
    // The main program's link map has an empty name; read it through /proc.
    const std::string file = lm->l_name && *lm->l_name ? lm->l_name : "/proc/self/exe";
    auto it = files.find(file);
    if (it == files.end()) it = files.emplace(file, read_symbols(file.c_str())).first;
    const auto s = it->second.find(reinterpret_cast<uint64_t>(p) - lm->l_addr);
    return s == it->second.end() ? "" : s->second;
}

// SF_EMU_LAUNCH_CENSUS=<file>: every (kernel, block size) launched, written when the process ends.
struct CensusKey {
    const void* kernel;
    int threads;
    bool operator<(const CensusKey& o) const { return kernel != o.kernel ? kernel < o.kernel : threads < o.threads; }
};

struct State {
    std::mutex mu;
    std::map<CensusKey, uint64_t> census;
    std::map<std::string, std::map<uint64_t, std::string>> symbols;  // per ELF file, by value
    bool loaded = false;
    Table table;
    std::set<const void*> emulation_only;
    std::unordered_map<const void*, std::pair<std::string, const KernelLimits*>> resolved;
};
State& state() {
    static State s;
    return s;
}
void ensure_loaded(State& s) {
    if (s.loaded) return;
    const char* env = std::getenv("SF_EMU_KERNEL_TABLE");
    s.table = load_table(env ? env : SFEMU_KERNEL_TABLE);
    s.loaded = true;
}

std::string demangled(const std::string& m) {
    int status = 0;
    char* d = abi::__cxa_demangle(m.c_str(), nullptr, nullptr, &status);
    std::string out = status == 0 && d ? d : m;
    std::free(d);
    return out;
}

void write_census_at_exit() {
    const char* path = std::getenv("SF_EMU_LAUNCH_CENSUS");
    if (path && *path) write_launch_census(path);
}

}  // namespace

void write_launch_census(const std::string& path_name) {
    const char* path = path_name.c_str();
    State& s = state();
    struct Row {
        std::string name;
        int threads;
        uint64_t launches;
        const KernelLimits* k;
    };
    std::vector<Row> rows;
    std::map<CensusKey, uint64_t> census;
    {
        std::lock_guard<std::mutex> lock(s.mu);
        census = s.census;
    }
    for (const auto& [key, n] : census) {
        std::string symbol;
        const KernelLimits* k = kernel_limits(key.kernel, &symbol);
        rows.push_back({demangled(symbol.empty() ? "?" : symbol), key.threads, n, k});
    }
    std::sort(rows.begin(), rows.end(),
              [](const Row& a, const Row& b) { return a.name != b.name ? a.name < b.name : a.threads < b.threads; });
    FILE* f = std::fopen(path, "w");
    if (!f) {
        std::fprintf(stderr, "sfemu: cannot write the launch census %s\n", path);
        return;
    }
    std::fprintf(f,
                 "# launches per kernel and block size (sm_90 table %s); occupancy: the theoretical share of an "
                 "SM's 64 warps (docs/EMULATION.md)\n",
                 kernel_table_path().c_str());
    std::fprintf(f, "threads\tlaunches\tregs\tsmem\tstack\tbound\tblocks_per_sm\toccupancy\tlimit\tkernel\n");
    for (const Row& r : rows) {
        if (!r.k) {
            std::fprintf(f, "%d\t%llu\t-\t-\t-\t-\t-\t-\t-\t%s\n", r.threads,
                         static_cast<unsigned long long>(r.launches), r.name.c_str());
            continue;
        }
        const Occupancy o = occupancy(*r.k, r.threads);
        std::fprintf(f, "%d\t%llu\t%d\t%d\t%d\t%d\t%d\t%.3f\t%s\t%s\n", r.threads,
                     static_cast<unsigned long long>(r.launches), r.k->regs, r.k->smem, r.k->stack, r.k->bound,
                     o.blocks, o.warps_share, o.limit, r.name.c_str());
    }
    std::fclose(f);
}

Occupancy occupancy(const KernelLimits& k, int threads) {
    // sm_90: 64 warps, 32 blocks, 65,536 registers (4 sub-partitions) and 228 KiB of shared memory
    // per SM, 1 KiB of it reserved per block; shared memory allocated in 128-byte units.
    const int warps = (threads + 31) / 32;
    Occupancy o{32, 0, "blocks"};
    if (64 / warps < o.blocks) o = {64 / warps, 0, "warps"};
    const int per_warp = (k.regs * 32 + kRegUnit - 1) / kRegUnit * kRegUnit;
    if (per_warp > 0) {
        const int by_regs = (kRegsPerBlock / kSubPartitions / per_warp) * kSubPartitions / warps;
        if (by_regs < o.blocks) o = {by_regs, 0, "registers"};
    }
    const int smem = (k.smem + 1024 + 127) / 128 * 128;
    if ((228 << 10) / smem < o.blocks) o = {(228 << 10) / smem, 0, "shared memory"};
    o.warps_share = o.blocks * warps / 64.0;
    return o;
}

int max_block_threads(int regs) {
    if (regs > 255) return 0;
    const int per_warp = (regs * 32 + kRegUnit - 1) / kRegUnit * kRegUnit;
    int best = 0;
    for (int threads = 32; threads <= kMaxBlock; threads += 32) {
        const int warps = threads / 32;
        if (per_warp * ((warps + kSubPartitions - 1) / kSubPartitions * kSubPartitions) <= kRegsPerBlock)
            best = threads;
    }
    return best;
}

void set_kernel_table(const std::string& path) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.table = load_table(path);
    s.loaded = true;
    s.resolved.clear();
}

std::string kernel_table_path() {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    ensure_loaded(s);
    return s.table.path;
}

void emulation_only(const void* kernel) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.emulation_only.insert(kernel);
}

const KernelLimits* kernel_limits(const void* kernel, std::string* symbol) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    ensure_loaded(s);
    if (s.table.path.empty()) return nullptr;
    auto it = s.resolved.find(kernel);
    if (it == s.resolved.end()) {
        std::string name = symbol_of(kernel, s.symbols);
        const auto k = s.table.kernels.find(name);
        it = s.resolved.emplace(kernel, std::make_pair(name, k == s.table.kernels.end() ? nullptr : &k->second)).first;
    }
    if (symbol) *symbol = it->second.first;
    return it->second.second;
}

std::string check_resources(const char* name, const LaunchConfig& cfg, const void* kernel) {
    if (const char* c = std::getenv("SF_EMU_LAUNCH_CENSUS"); c && *c) {
        State& s = state();  // constructed first, so destroyed after the census is written
        static const bool registered = (std::atexit(write_census_at_exit), true);
        (void)registered;
        std::lock_guard<std::mutex> lock(s.mu);
        ++s.census[{kernel, static_cast<int>(cfg.block.x * cfg.block.y * cfg.block.z)}];
    }
    std::string symbol;
    const KernelLimits* k = kernel_limits(kernel, &symbol);
    if (!k) {
        if (kernel_table_path().empty()) return "";
        {
            State& s = state();
            std::lock_guard<std::mutex> lock(s.mu);
            if (s.emulation_only.count(kernel)) return "";
        }
        // Every kernel the project launches is compiled by nvcc too: a miss is a name the two builds
        // spell differently, or a kernel that exists only here (sfemu::emulation_only).
        fatal(
            "kernel %s (symbol %s) has no record in the sm_90 kernel table %s, so its launch limits cannot be "
            "checked (docs/EMULATION.md, \"Launch resources\")",
            name, symbol.empty() ? "unknown" : symbol.c_str(), kernel_table_path().c_str());
    }
    const int threads = static_cast<int>(cfg.block.x * cfg.block.y * cfg.block.z);
    char why[256];
    if (k->bound && threads > k->bound) {
        std::snprintf(why, sizeof why, "a block of %d threads, more than its __launch_bounds__ maximum of %d", threads,
                      k->bound);
        return why;
    }
    if (threads > max_block_threads(k->regs)) {
        std::snprintf(why, sizeof why,
                      "a block of %d threads at %d registers per thread (sm_90 build): at most %d threads fit in "
                      "a block's %d registers",
                      threads, k->regs, max_block_threads(k->regs), kRegsPerBlock);
        return why;
    }
    if (k->smem + cfg.smem > (48u << 10)) {
        std::snprintf(why, sizeof why, "%d bytes of static and %zu of dynamic shared memory, more than 48 KiB", k->smem,
                      cfg.smem);
        return why;
    }
    return "";
}

}  // namespace sfemu
