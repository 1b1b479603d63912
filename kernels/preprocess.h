// uint8 batch -> model input (NHWC): channels [pixels/255 ..., valid mask], where the mask is 1
// inside the label's letterbox rectangle [rect_x0, rect_x1) x [rect_y0, rect_y1) and 0 outside.
// pixels: (N, H, W, Cp) uint8, Cp = 1 (gray) or 3 (RGB); out: (N, H, W, Cp + 1).
// The CUDA version writes bf16 (the model's activation type); the reference writes float.
#pragma once
#include <cstddef>
#include <cstdint>

#include "data/label.h"
#include "runtime/exec.h"

namespace kern {

void preprocess_ref(int n, int h, int w, int cp, const uint8_t* pixels, const data::Label* labels, float* out);
// out: device bf16 (N,H,W,Cp+1); pixels and labels in device memory. Launch only, on ex.stream.
void preprocess_cuda(const rt::Exec& ex, int n, int h, int w, int cp, const uint8_t* pixels,
                     const data::Label* labels, void* out_bf16);

}  // namespace kern
