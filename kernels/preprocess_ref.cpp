// CPU reference of the input preprocessing (kernels/preprocess.h): uint8 NHWC pixels -> float NHWC
// [pixels/255 ..., valid mask]. Naive loops; the mask rule is the one the CUDA kernel follows:
// pixel (x, y), integer indices, is valid iff rect_x0 <= x < rect_x1 and rect_y0 <= y < rect_y1.
#include "kernels/preprocess.h"
#include "runtime/error.h"

namespace kern {

void preprocess_ref(int n, int h, int w, int cp, const uint8_t* pixels, const data::Label* labels, float* out) {
    SF_CHECK(n >= 0 && h >= 0 && w >= 0 && (cp == 1 || cp == 3), "preprocess_ref: bad shape n=%d h=%d w=%d cp=%d", n, h,
             w, cp);
    const int c = cp + 1;
    for (int i = 0; i < n; ++i) {
        const data::Label& l = labels[i];
        for (int y = 0; y < h; ++y) {
            const bool row_valid = l.rect_y0 <= static_cast<float>(y) && static_cast<float>(y) < l.rect_y1;
            for (int x = 0; x < w; ++x) {
                const size_t pix = (static_cast<size_t>(i) * h + y) * w + x;
                const uint8_t* in = pixels + pix * cp;  // (cp) uint8
                float* o = out + pix * c;               // (cp + 1) float
                for (int k = 0; k < cp; ++k) o[k] = static_cast<float>(in[k]) / 255.0f;
                const bool col_valid = l.rect_x0 <= static_cast<float>(x) && static_cast<float>(x) < l.rect_x1;
                o[cp] = row_valid && col_valid ? 1.0f : 0.0f;
            }
        }
    }
}

}  // namespace kern
