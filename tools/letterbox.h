// The original's letterbox of an arbitrary image onto the model canvas (MODEL_SPEC §3.1, §4.2)
// and its inverse (§1.7 step 4), for `slidefuse predict`:
//   scale = min(W/w, H/h); resized = round_half_even(w*scale) x round_half_even(h*scale);
//   centred paste (pad_left = floor((W - rw)/2), pad_top likewise) on a canvas filled with 255;
//   a point maps as x' = scale*x + pad_left, and back as x = (x' - pad_left)/scale.
// Coordinates are continuous pixel coordinates (pixel i covers [i, i+1)), x right, y down, the
// convention of the labels (data/label.h) and of the generator (data/generator.h), whose private
// letterbox this mirrors for images that arrive from outside.
#pragma once
#include <cstdint>

#include "data/label.h"

namespace tools {

struct Letterbox {
    int src_w = 0, src_h = 0;        // original image
    int canvas_w = 0, canvas_h = 0;  // model input (model.input_width/height)
    double scale = 1;                // min(canvas_w/src_w, canvas_h/src_h)
    int resized_w = 0, resized_h = 0;
    int pad_left = 0, pad_top = 0;
};

// Throws rt::Error naming the sizes when either is not positive. A side that would round to 0
// (an image more than 2*W/H times as wide as high) is kept at 1 pixel (cv2.resize refuses it).
Letterbox letterbox_geometry(int src_w, int src_h, int canvas_w, int canvas_h);

// Original image -> canvas (how labels are mapped).
void to_canvas(const Letterbox& lb, double x, double y, double* cx, double* cy);
// Canvas -> original image (how decoded predictions are mapped back). Not clamped, as the original.
void to_original(const Letterbox& lb, double cx, double cy, double* x, double* y);

// src: (src_h, src_w, channels) uint8 HWC; canvas: (canvas_h, canvas_w, channels), overwritten:
// 255 everywhere, the image resized bilinearly into the rectangle (cv2 INTER_LINEAR: pixel-centre
// alignment, source coordinate clamped at the borders, no anti-aliasing when shrinking; rounded
// half up to uint8).
void letterbox_pixels(const Letterbox& lb, const uint8_t* src, int channels, uint8_t* canvas);

// A label holding only the valid rectangle [pad_left, pad_left+rw) x [pad_top, pad_top+rh)
// (the mask channel of kern::preprocess_ref); the object fields are 0.
data::Label valid_rect_label(const Letterbox& lb);

}  // namespace tools
