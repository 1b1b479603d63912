// The one translation unit that compiles stb_image (static functions: no symbol can clash with
// another copy of stb linked into the same program). PNG and JPEG only; decoding from memory
// only, so every file error is ours and names the file.
#include "tools/image_io.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "runtime/error.h"

#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_NO_STDIO
#define STBI_FAILURE_USERMSG
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC only
#endif
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace tools {

namespace {

struct StbFree {
    void operator()(stbi_uc* p) const { stbi_image_free(p); }
};

}  // namespace

Image8 decode_image(const uint8_t* data, size_t size, const std::string& name) {
    SF_CHECK(size > 0, "%s: empty file (expected a PNG or JPEG image)", name.c_str());
    SF_CHECK(size <= static_cast<size_t>(INT32_MAX), "%s: %zu bytes is too large for an image file", name.c_str(),
             size);
    const int len = static_cast<int>(size);
    int w = 0, h = 0, c = 0;
    if (!stbi_info_from_memory(data, len, &w, &h, &c))
        SF_FAIL("%s: not a PNG or JPEG image (%s)", name.c_str(), stbi_failure_reason());
    SF_CHECK(static_cast<int64_t>(w) * h <= kMaxImagePixels, "%s: %dx%d pixels is larger than the %lld accepted",
             name.c_str(), w, h, static_cast<long long>(kMaxImagePixels));
    std::unique_ptr<stbi_uc, StbFree> px(stbi_load_from_memory(data, len, &w, &h, &c, 0));
    if (!px) SF_FAIL("%s: cannot decode the image: %s", name.c_str(), stbi_failure_reason());
    SF_CHECK(w > 0 && h > 0 && c >= 1 && c <= 4, "%s: decoder returned %dx%dx%d", name.c_str(), w, h, c);
    Image8 im;
    im.width = w;
    im.height = h;
    im.channels = c;
    im.pixels.assign(px.get(), px.get() + static_cast<size_t>(w) * h * c);
    return im;
}

Image8 read_image(const std::string& path) {
    std::error_code ec;
    SF_CHECK(std::filesystem::exists(path, ec), "%s: no such file", path.c_str());
    SF_CHECK(std::filesystem::is_regular_file(path, ec), "%s: not a regular file", path.c_str());
    std::ifstream f(path, std::ios::binary);
    if (!f) SF_FAIL("%s: cannot open: %s", path.c_str(), std::strerror(errno));
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    SF_CHECK(!f.bad(), "%s: read error", path.c_str());
    return decode_image(bytes.data(), bytes.size(), path);
}

std::vector<uint8_t> to_model_pixels(const Image8& im, int channels_out) {
    SF_CHECK(channels_out == 1 || channels_out == 3, "model pixel channels must be 1 (gray) or 3 (RGB), got %d",
             channels_out);
    SF_CHECK(im.channels >= 1 && im.channels <= 4 &&
                 im.pixels.size() == static_cast<size_t>(im.width) * im.height * im.channels,
             "bad image buffer %dx%dx%d (%zu bytes)", im.width, im.height, im.channels, im.pixels.size());
    const size_t n = static_cast<size_t>(im.width) * im.height, cin = static_cast<size_t>(im.channels);
    const bool gray_in = im.channels <= 2;  // gray or gray + alpha
    std::vector<uint8_t> out(n * static_cast<size_t>(channels_out));
    for (size_t i = 0; i < n; ++i) {
        const uint8_t* p = &im.pixels[i * cin];
        if (channels_out == 3) {
            for (int c = 0; c < 3; ++c) out[i * 3 + static_cast<size_t>(c)] = gray_in ? p[0] : p[c];
        } else if (gray_in) {
            out[i] = p[0];
        } else {
            out[i] = static_cast<uint8_t>((4899u * p[0] + 9617u * p[1] + 1868u * p[2] + 8192u) >> 14);
        }
    }
    return out;
}

}  // namespace tools
