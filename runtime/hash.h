// The one 64-bit mixer of the project (splitmix64, Steele/Lea/Flood): counter-based random
// streams for initialisation, shuffles, the generator and tests are built on it, so any value
// can be recomputed from its counters alone.
#pragma once
#include <cstdint>

namespace rt {

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

// splitmix64's output finaliser.
constexpr uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// splitmix64 of a state: the value its generator returns after advancing from x.
constexpr uint64_t splitmix64(uint64_t x) { return mix64(x + kGoldenGamma); }

static_assert(splitmix64(0) == 0xE220A8397B1DCDAFull, "splitmix64's published first output for seed 0");

}  // namespace rt
