// Per-epoch sample order (data/loader.h: epoch_order). A Fisher-Yates shuffle driven by a
// counter-based hash of (seed, epoch, position), so the order of any epoch can be rebuilt from
// those numbers alone — which is what makes a loader cursor resumable without saving RNG state —
// then rank sharding: rank r takes positions r, r + world_size, ...
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "runtime/error.h"
#include "runtime/hash.h"

namespace data {

namespace {

using rt::splitmix64;

// Uniform in [0, bound) from 64 random bits by multiply-high (bias < bound / 2^64, negligible).
uint64_t below(uint64_t bits, uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * bound) >> 64);
}

}  // namespace

std::vector<uint64_t> epoch_order(uint64_t total, uint64_t seed, uint64_t epoch, bool shuffle, int rank,
                                  int world_size) {
    SF_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "epoch_order: rank %d outside world of size %d", rank,
             world_size);
    std::vector<uint64_t> perm(total);
    std::iota(perm.begin(), perm.end(), uint64_t{0});
    if (shuffle && total > 1) {
        // One key per (seed, epoch); the swap partner of position i is hash(key, i) mod (i + 1).
        const uint64_t key = splitmix64(seed ^ splitmix64(epoch ^ 0x5EEDF00Dull));
        for (uint64_t i = total - 1; i > 0; --i) {
            const uint64_t j = below(splitmix64(key + i * 0xD1B54A32D192ED03ull), i + 1);
            std::swap(perm[i], perm[j]);
        }
    }
    if (world_size == 1) return perm;
    std::vector<uint64_t> mine;
    mine.reserve(total / world_size + 1);
    for (uint64_t i = static_cast<uint64_t>(rank); i < total; i += static_cast<uint64_t>(world_size))
        mine.push_back(perm[i]);
    return mine;
}

}  // namespace data
