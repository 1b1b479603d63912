// Internal to the shard reader/writer: the version-1 header (docs/FORMAT.md), its encoding and
// the section layout both sides compute from (spec, count).
#pragma once
#include <cstddef>
#include <cstdint>

#include "data/shard.h"

namespace data {
namespace shard_detail {

constexpr uint8_t kMagic[8] = {'S', 'F', 'S', 'H', 'A', 'R', 'D', 0};
constexpr uint32_t kFlagQuant4 = 1u;
constexpr uint32_t kKnownFlags = kFlagQuant4;
constexpr size_t kHeaderCrcOffset = kShardHeaderBytes - 4;
constexpr size_t kSectionAlign = 64;

// Byte offsets of the header fields.
enum HeaderField : size_t {
    kOffMagic = 0,
    kOffVersion = 8,
    kOffHeaderBytes = 12,
    kOffCount = 16,
    kOffHeight = 24,
    kOffWidth = 28,
    kOffChannels = 32,
    kOffFlags = 36,
    kOffLabelBytes = 40,
    kOffPixelBytes = 44,
    kOffPixelsOffset = 48,
    kOffLabelsOffset = 56,
    kOffCrcsOffset = 64,
    kOffFileBytes = 72,
    kOffReserved = 80,  // 44 zero bytes up to the CRC
};

// Where each section starts for `count` records of `pixel_bytes` stored bytes each.
struct Layout {
    uint64_t pixels_offset = kShardPixelsOffset;
    uint64_t labels_offset = 0;
    uint64_t crcs_offset = 0;
    uint64_t file_bytes = 0;
};

inline Layout layout_for(uint64_t count, uint64_t pixel_bytes) {
    Layout l;
    const uint64_t pixels_end = l.pixels_offset + count * pixel_bytes;
    l.labels_offset = (pixels_end + kSectionAlign - 1) / kSectionAlign * kSectionAlign;
    l.crcs_offset = l.labels_offset + count * kLabelRecordBytes;
    l.file_bytes = l.crcs_offset + 4 * count;
    return l;
}

// Fills the 128-byte header, CRC included.
void encode_header(const ShardSpec& spec, uint64_t count, uint8_t out[kShardHeaderBytes]);

}  // namespace shard_detail
}  // namespace data
