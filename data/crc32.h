// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF): the same
// value as zlib's crc32() and Python's zlib.crc32. Table-driven, slicing by 16 bytes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace data {

// CRC of `n` bytes at `p`, continuing from `crc` (the value returned for the preceding bytes;
// 0 to start). crc32(b, crc32(a, 0)) == crc32 of a then b.
uint32_t crc32(const void* p, size_t n, uint32_t crc = 0);

}  // namespace data
