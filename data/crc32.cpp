// Slicing-by-16 CRC-32: 16 tables of 256 entries, table k = the CRC of a byte followed by k zero
// bytes, so 16 input bytes are folded with 16 independent lookups per step (several bytes per
// cycle instead of one lookup chain per byte).
#include "data/crc32.h"

#include <array>

namespace data {

namespace {

constexpr uint32_t kPoly = 0xEDB88320u;
constexpr int kSlices = 16;

struct Tables {
    std::array<std::array<uint32_t, 256>, kSlices> t;
    Tables() {
        for (uint32_t b = 0; b < 256; ++b) {
            uint32_t c = b;
            for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? kPoly : 0u);
            t[0][b] = c;
        }
        for (int s = 1; s < kSlices; ++s)
            for (uint32_t b = 0; b < 256; ++b) t[s][b] = (t[s - 1][b] >> 8) ^ t[0][t[s - 1][b] & 0xFFu];
    }
};

const Tables& tables() {
    static const Tables tb;
    return tb;
}

inline uint32_t load_le32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
           (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
    const auto& t = tables().t;
    const uint8_t* p = static_cast<const uint8_t*>(data);
    uint32_t c = ~crc;
    while (n >= kSlices) {
        const uint32_t a = load_le32(p) ^ c;
        const uint32_t b = load_le32(p + 4);
        const uint32_t d = load_le32(p + 8);
        const uint32_t e = load_le32(p + 12);
        c = t[15][a & 0xFF] ^ t[14][(a >> 8) & 0xFF] ^ t[13][(a >> 16) & 0xFF] ^ t[12][a >> 24] ^  //
            t[11][b & 0xFF] ^ t[10][(b >> 8) & 0xFF] ^ t[9][(b >> 16) & 0xFF] ^ t[8][b >> 24] ^    //
            t[7][d & 0xFF] ^ t[6][(d >> 8) & 0xFF] ^ t[5][(d >> 16) & 0xFF] ^ t[4][d >> 24] ^      //
            t[3][e & 0xFF] ^ t[2][(e >> 8) & 0xFF] ^ t[1][(e >> 16) & 0xFF] ^ t[0][e >> 24];
        p += kSlices;
        n -= kSlices;
    }
    while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
    return ~c;
}

}  // namespace data
