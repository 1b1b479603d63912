// The element-wise ops of the layers, overloaded by activation element type so a layer template
// reads the same on both backends: float pointers go to the CPU reference dispatch (kernels/*.h),
// bf16 pointers to the CUDA kernels (kernels/*_cuda.h). Same contracts as kernels/eltwise.h and
// kernels/upsample.h: y overwritten, backward outputs accumulated. `ws` is the shared fp32
// reduction workspace (CUDA only; ignored by the CPU references).
#pragma once
#include <cstddef>

#include "kernels/bf16.h"
#include "kernels/eltwise.h"
#include "kernels/eltwise_cuda.h"
#include "kernels/tensor.h"
#include "kernels/upsample.h"
#include "kernels/upsample_cuda.h"
#include "runtime/exec.h"

namespace model::ops {

using kern::bf16;

inline void add(const rt::Exec& ex, size_t n, const float* a, const float* b, float* y) { kern::add(ex, n, a, b, y); }
inline void add(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, bf16* y) {
    kern::add_bf16_cuda(ex, n, a, b, y);
}

inline void accumulate(const rt::Exec& ex, size_t n, const float* x, float* y) { kern::accumulate(ex, n, x, y); }
inline void accumulate(const rt::Exec& ex, size_t n, const bf16* x, bf16* y) {
    kern::accumulate_bf16_cuda(ex, n, x, y);
}

inline void upsample_forward(const rt::Exec& ex, const kern::Shape4& in, int f, const float* x, float* y) {
    kern::upsample_bilinear_forward(ex, in, f, x, y);
}
inline void upsample_forward(const rt::Exec& ex, const kern::Shape4& in, int f, const bf16* x, bf16* y) {
    kern::upsample_bilinear_forward_bf16_cuda(ex, in, f, x, y);
}
inline void upsample_backward(const rt::Exec& ex, const kern::Shape4& in, int f, const float* dy, float* dx) {
    kern::upsample_bilinear_backward(ex, in, f, dy, dx);
}
inline void upsample_backward(const rt::Exec& ex, const kern::Shape4& in, int f, const bf16* dy, bf16* dx) {
    kern::upsample_bilinear_backward_bf16_cuda(ex, in, f, dy, dx);
}

inline void fusion_forward(const rt::Exec& ex, size_t n, const float* a, const float* b, const float* wa,
                           const float* wb, float* y) {
    kern::fusion_forward(ex, n, a, b, wa, wb, y);
}
inline void fusion_forward(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, const float* wa,
                           const float* wb, bf16* y) {
    kern::fusion_forward_bf16_cuda(ex, n, a, b, wa, wb, y);
}
inline void fusion_backward(const rt::Exec& ex, size_t n, const float* a, const float* b, const float* wa,
                            const float* wb, const float* dy, float* da, float* db, float* dwa, float* dwb, float*,
                            size_t) {
    kern::fusion_backward(ex, n, a, b, wa, wb, dy, da, db, dwa, dwb);
}
inline void fusion_backward(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, const float* wa,
                            const float* wb, const bf16* dy, bf16* da, bf16* db, float* dwa, float* dwb, float* ws,
                            size_t ws_floats) {
    kern::fusion_backward_bf16_cuda(ex, n, a, b, wa, wb, dy, da, db, dwa, dwb, ws, ws_floats);
}

}  // namespace model::ops
