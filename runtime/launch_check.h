// Argument checks shared by the CUDA launchers (host side, CUDA-free): pointer alignment, byte-range
// overlap, the Exec backend. The messages name the launcher (`op`) and the offending value.
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/error.h"
#include "runtime/exec.h"

namespace rt {

// p is non-null and a multiple of `bytes`.
inline bool aligned(const void* p, size_t bytes) { return p != nullptr && reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Byte ranges [a, a + na) and [b, b + nb) overlap.
inline bool overlap(const void* a, size_t na, const void* b, size_t nb) {
    const uintptr_t pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + nb && pb < pa + na;
}

// Throws "<op>: called with a <backend> Exec" unless ex runs on CUDA.
inline void check_cuda_exec(const char* op, const Exec& ex) {
    SF_CHECK(ex.is_cuda(), "%s: called with a %s Exec", op, backend_name(ex.backend));
}

// Throws "<op>: <name> must be a non-null, <bytes>-byte aligned device pointer (got <p>)" unless
// aligned(p, bytes).
inline void check_device_ptr(const char* op, const char* name, const void* p, size_t bytes) {
    SF_CHECK(aligned(p, bytes), "%s: %s must be a non-null, %zu-byte aligned device pointer (got %p)", op, name, bytes,
             p);
}

}  // namespace rt
