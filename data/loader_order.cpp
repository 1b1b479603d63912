// Per-epoch sample order (data/loader.h: epoch_order). A Fisher-Yates shuffle driven by a
// counter-based hash of (seed, epoch, position), so the order of any epoch can be rebuilt from
// those numbers alone — which is what makes a loader cursor resumable without saving RNG state —
// then sharding by global batch: rank r of W takes the batch_size-blocks r, r + W, r + 2W, ... of
// the permutation, so interleaving the ranks' batches gives the world-1 batch sequence.
#include <algorithm>
#include <cstddef>
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

void check_shard_args(int batch_size, int rank, int world_size) {
    SF_CHECK(world_size >= 1, "data sharding: world size must be >= 1 (got %d)", world_size);
    SF_CHECK(rank >= 0 && rank < world_size, "data sharding: rank %d outside [0, %d) (world of size %d)", rank,
             world_size, world_size);
    SF_CHECK(batch_size >= 1, "data sharding: batch_size must be >= 1 (got %d)", batch_size);
}

}  // namespace

uint64_t rank_batches(uint64_t total, int batch_size, bool drop_last, int rank, int world_size) {
    check_shard_args(batch_size, rank, world_size);
    const uint64_t b = static_cast<uint64_t>(batch_size), w = static_cast<uint64_t>(world_size);
    if (drop_last) return total / (b * w);
    const uint64_t global = (total + b - 1) / b;  // the final partial batch included
    return global / w + (static_cast<uint64_t>(rank) < global % w ? 1 : 0);
}

uint64_t rank_samples(uint64_t total, int batch_size, bool drop_last, int rank, int world_size) {
    const uint64_t n = rank_batches(total, batch_size, drop_last, rank, world_size);
    const uint64_t b = static_cast<uint64_t>(batch_size);
    if (drop_last || n == 0 || total % b == 0) return n * b;
    // Rank r's last batch is G_{(n-1)*W + r}; it is the partial one when it is the last global batch.
    const uint64_t last = (n - 1) * static_cast<uint64_t>(world_size) + static_cast<uint64_t>(rank);
    return last == total / b ? n * b - (b - total % b) : n * b;
}

std::vector<uint64_t> epoch_order(uint64_t total, uint64_t seed, uint64_t epoch, bool shuffle, int batch_size,
                                  bool drop_last, int rank, int world_size) {
    const uint64_t mine = rank_samples(total, batch_size, drop_last, rank, world_size);  // checks the args
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
    if (world_size == 1) {
        perm.resize(mine);  // drop_last: the samples of no full batch are not read this epoch
        return perm;
    }
    // Global batch j = k*W + r starts at position j * b; the last one may be cut at total.
    const uint64_t b = static_cast<uint64_t>(batch_size), w = static_cast<uint64_t>(world_size);
    std::vector<uint64_t> out;
    out.reserve(mine);
    for (uint64_t start = static_cast<uint64_t>(rank) * b; out.size() < mine; start += w * b) {
        const uint64_t end = std::min(start + b, total);
        out.insert(out.end(), perm.begin() + static_cast<std::ptrdiff_t>(start),
                   perm.begin() + static_cast<std::ptrdiff_t>(end));
    }
    return out;
}

}  // namespace data
