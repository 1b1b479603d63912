// Minimal PNG writer for previews and debugging: 8-bit gray or RGB, no filtering, the zlib stream
// made of stored (uncompressed) deflate blocks with its Adler-32, a CRC-32 per chunk. No zlib
// dependency; files are about as large as the raw pixels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace data {

// pixels: (height, width, channels) uint8 HWC, channels 1 (gray) or 3 (RGB).
std::vector<uint8_t> encode_png(const uint8_t* pixels, int width, int height, int channels);
// Writes encode_png's bytes to path; throws rt::Error naming the path on failure.
void write_png(const std::string& path, const uint8_t* pixels, int width, int height, int channels);

}  // namespace data
