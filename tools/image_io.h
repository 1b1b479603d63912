// Image files for `slidefuse predict`: PNG and JPEG decoded with stb_image (Debian libstb-dev,
// compiled into tools/image_io.cpp only), and the conversion to the model's pixel channels the
// way the original reads a CAPTCHA: cv2.imread(IMREAD_COLOR) then cvtColor(BGR2GRAY)
// (MODEL_SPEC §4.2 step 1).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tools {

// 8-bit image as stored in the file: (height, width, channels) HWC; channels 1 gray, 2 gray +
// alpha, 3 RGB, 4 RGBA. 16-bit PNGs are reduced to their high byte (as cv2.imread does).
struct Image8 {
    int width = 0, height = 0, channels = 0;
    std::vector<uint8_t> pixels;
};

// Largest image accepted (pixels): refuses absurd sizes before allocating.
constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

// Reads and decodes a PNG or JPEG file. Throws rt::Error naming the file and the reason
// (missing, unreadable, not an image, corrupt data with stb's reason, too large).
Image8 read_image(const std::string& path);
// The same from bytes in memory; `name` stands for the file in messages.
Image8 decode_image(const uint8_t* data, size_t size, const std::string& name);

// The model's pixel channels: channels_out 1 = gray, 3 = RGB. Alpha is dropped, not composited
// (cv2.imread IMREAD_COLOR ignores it); gray from RGB uses OpenCV's fixed-point BT.601 weights,
// gray = (4899 R + 9617 G + 1868 B + 8192) >> 14; a gray file stays as it is; RGB from gray
// repeats the value. Result: (height, width, channels_out) uint8.
std::vector<uint8_t> to_model_pixels(const Image8& im, int channels_out);

}  // namespace tools
