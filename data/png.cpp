#include "data/png.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>

#include "data/crc32.h"
#include "runtime/error.h"

namespace data {

namespace {

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

void put_chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
    put_be32(out, static_cast<uint32_t>(data.size()));
    const size_t start = out.size();
    out.insert(out.end(), type, type + 4);
    out.insert(out.end(), data.begin(), data.end());
    put_be32(out, crc32(&out[start], out.size() - start));
}

}  // namespace

std::vector<uint8_t> encode_png(const uint8_t* pixels, int width, int height, int channels) {
    SF_CHECK(width >= 1 && height >= 1 && (channels == 1 || channels == 3),
             "png: need width, height >= 1 and 1 or 3 channels (got %dx%dx%d)", width, height, channels);
    // Raw scanlines, each prefixed by filter type 0 (none).
    const size_t row = static_cast<size_t>(width) * channels;
    std::vector<uint8_t> raw;
    raw.reserve((row + 1) * height);
    for (int y = 0; y < height; ++y) {
        raw.push_back(0);
        raw.insert(raw.end(), pixels + y * row, pixels + (y + 1) * row);
    }
    // zlib: CMF/FLG (deflate, 32K window, no dictionary, check bits), stored blocks of at most
    // 65535 bytes (BFINAL on the last, LEN then ~LEN little-endian), Adler-32 big-endian.
    std::vector<uint8_t> z = {0x78, 0x01};
    uint32_t a = 1, b = 0;
    for (size_t pos = 0; pos < raw.size() || pos == 0;) {
        const size_t n = std::min<size_t>(65535, raw.size() - pos);
        const bool last = pos + n == raw.size();
        z.push_back(last ? 1 : 0);
        z.push_back(static_cast<uint8_t>(n & 0xFF));
        z.push_back(static_cast<uint8_t>(n >> 8));
        z.push_back(static_cast<uint8_t>(~n & 0xFF));
        z.push_back(static_cast<uint8_t>((~n >> 8) & 0xFF));
        z.insert(z.end(), raw.begin() + static_cast<std::ptrdiff_t>(pos),
                 raw.begin() + static_cast<std::ptrdiff_t>(pos + n));
        for (size_t i = pos; i < pos + n; ++i) {
            a = (a + raw[i]) % 65521;
            b = (b + a) % 65521;
        }
        pos += n;
        if (last) break;
    }
    put_be32(z, (b << 16) | a);

    std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    std::vector<uint8_t> ihdr;
    put_be32(ihdr, static_cast<uint32_t>(width));
    put_be32(ihdr, static_cast<uint32_t>(height));
    ihdr.insert(ihdr.end(), {8, static_cast<uint8_t>(channels == 3 ? 2 : 0), 0, 0, 0});  // depth, colour type
    put_chunk(out, "IHDR", ihdr);
    put_chunk(out, "IDAT", z);
    put_chunk(out, "IEND", {});
    return out;
}

void write_png(const std::string& path, const uint8_t* pixels, int width, int height, int channels) {
    const std::vector<uint8_t> bytes = encode_png(pixels, width, height, channels);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    SF_CHECK(f != nullptr, "png: cannot open %s for writing", path.c_str());
    const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
    const bool closed = std::fclose(f) == 0;
    SF_CHECK(n == bytes.size() && closed, "png: failed writing %zu bytes to %s", bytes.size(), path.c_str());
}

}  // namespace data
