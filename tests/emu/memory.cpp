// Device and pinned memory of the CPU emulation: ordinary heap blocks (so AddressSanitizer sees
// every access past an allocation), 256-byte aligned like cudaMalloc's, device ones filled with a
// poison pattern so a read of memory nobody wrote shows up as NaN (or -1). A registry of the
// allocations checks the pointers given to copies and lets a launch be re-run from a snapshot.
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "tests/emu/emu_internal.h"
#include "tests/emu/streams.h"

namespace sfemu {

namespace {

constexpr size_t kAlign = 256;  // cudaMalloc's guarantee

std::map<uintptr_t, Allocation>& registry() {
    static std::map<uintptr_t, Allocation> r;
    return r;
}

}  // namespace

const Allocation* find_allocation(const void* p, size_t bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = registry().upper_bound(a);
    if (it == registry().begin()) return nullptr;
    --it;
    const Allocation& al = it->second;
    // A zero-byte range at the end of an allocation is still inside it.
    if (a + bytes > it->first + al.bytes || (bytes == 0 && a > it->first + al.bytes)) return nullptr;
    return &al;
}

void* allocate(size_t bytes, bool device) {
    if (device && launch_only()) {  // zero pages, backed only where host code writes (tests/emu/streams.h)
        void* m = mmap(nullptr, bytes == 0 ? 1 : bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) return nullptr;
        registry()[reinterpret_cast<uintptr_t>(m)] = Allocation{static_cast<char*>(m), bytes, device, true};
        return m;
    }
    // The exact size is requested, so AddressSanitizer reports an access one byte past it.
    void* p = nullptr;
    if (posix_memalign(&p, kAlign, bytes == 0 ? 1 : bytes) != 0) return nullptr;
    if (device) std::memset(p, kPoison, bytes);
    registry()[reinterpret_cast<uintptr_t>(p)] = Allocation{static_cast<char*>(p), bytes, device};
    return p;
}

bool release(void* p, bool device) {
    auto it = registry().find(reinterpret_cast<uintptr_t>(p));
    if (it == registry().end() || it->second.device != device) return false;
    const Allocation a = it->second;
    registry().erase(it);
    if (a.mapped)
        munmap(p, a.bytes == 0 ? 1 : a.bytes);
    else
        std::free(p);
    return true;
}

size_t device_bytes_in_use() {
    size_t n = 0;
    for (const auto& kv : registry())
        if (kv.second.device) n += kv.second.bytes;
    return n;
}

void snapshot_device(Snapshot& s) {
    size_t k = 0;
    for (const auto& kv : registry()) {
        const Allocation& a = kv.second;
        if (!a.device) continue;
        if (k == s.parts.size()) s.parts.emplace_back();
        s.parts[k].first = &a;
        s.parts[k].second.assign(a.base, a.base + a.bytes);
        ++k;
    }
    s.parts.resize(k);
}

void restore(const Snapshot& s) {
    for (const auto& part : s.parts) std::memcpy(part.first->base, part.second.data(), part.second.size());
}

std::string compare_device(const Snapshot& s) {
    for (const auto& part : s.parts) {
        const Allocation& a = *part.first;
        const char* want = part.second.data();
        if (std::memcmp(a.base, want, a.bytes) == 0) continue;
        size_t i = 0;
        while (a.base[i] == want[i]) ++i;
        const size_t word = i / 4 * 4;
        float f0 = 0, f1 = 0;
        if (word + 4 <= a.bytes) {
            std::memcpy(&f0, want + word, 4);
            std::memcpy(&f1, a.base + word, 4);
        }
        char buf[256];
        std::snprintf(
            buf, sizeof buf,
            "device allocation %p (%zu bytes) differs first at byte %zu (the 4 bytes there as fp32: %.9g vs %.9g)",
            static_cast<void*>(a.base), a.bytes, i, f0, f1);
        return buf;
    }
    return "";
}

}  // namespace sfemu
