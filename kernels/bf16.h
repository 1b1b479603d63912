// bfloat16 storage type for CUDA-free headers: the same 16 bits as CUDA's __nv_bfloat16
// (sign, 8-bit exponent, 7-bit mantissa), so device buffers declared with it are passed to
// kernels as __nv_bfloat16*. Host conversions for tests and references: round to nearest even,
// NaN stays NaN.
#pragma once
#include <cstdint>
#include <cstring>

namespace kern {

struct bf16 {
    uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes");

inline float bf16_to_float(bf16 v) {
    const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline bf16 float_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
    u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even
    return bf16{static_cast<uint16_t>(u >> 16)};
}

// The value a float takes after a round trip through bf16.
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace kern
