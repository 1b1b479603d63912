// The element-wise ops of the layers, overloaded by activation element type so a layer template
// reads the same on both backends: float pointers go to the CPU reference dispatch (kernels/*.h),
// bf16 pointers to the CUDA kernels (kernels/*_cuda.h). Every op of a backward that reads or writes
// an activation gradient is here and reports it to the active GradTape (model/grad_tape.h) first:
// the tape says whether each written gradient gets its first contribution (overwrite) or a later
// one (accumulate), and while the planner traces the backward nothing is launched. `ws` is the
// shared fp32 reduction workspace (CUDA only; ignored by the CPU references).
#pragma once
#include <cstddef>

#include "kernels/activation.h"
#include "kernels/batchnorm.h"
#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/conv.h"
#include "kernels/dwconv_cuda.h"
#include "kernels/eltwise.h"
#include "kernels/eltwise_cuda.h"
#include "kernels/head_conv_cuda.h"
#include "kernels/pwconv_cuda.h"
#include "kernels/tensor.h"
#include "kernels/upsample.h"
#include "kernels/upsample_cuda.h"
#include "model/gpu_ops.h"
#include "model/grad_tape.h"
#include "runtime/exec.h"

namespace model::ops {

using kern::bf16;

inline void add(const rt::Exec& ex, size_t n, const float* a, const float* b, float* y) { kern::add(ex, n, a, b, y); }
inline void add(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, bf16* y) {
    kern::add_bf16_cuda(ex, n, a, b, y);
}

// y += x (y = x for y's first contribution).
inline void accumulate(const rt::Exec& ex, size_t n, const float* x, float* y) {
    bool acc;
    if (grad_op({x}, {y}, &acc, nullptr, true)) kern::accumulate(ex, n, x, y, acc);
}
inline void accumulate(const rt::Exec& ex, size_t n, const bf16* x, bf16* y) {
    bool acc;
    if (grad_op({x}, {y}, &acc, nullptr, true)) kern::accumulate_bf16_cuda(ex, n, x, y, acc);
}

inline void upsample_forward(const rt::Exec& ex, const kern::Shape4& in, int f, const float* x, float* y) {
    kern::upsample_bilinear_forward(ex, in, f, x, y);
}
inline void upsample_forward(const rt::Exec& ex, const kern::Shape4& in, int f, const bf16* x, bf16* y) {
    kern::upsample_bilinear_forward_bf16_cuda(ex, in, f, x, y);
}
// row_loads: the CUDA kernel's row-batched loads (GpuOps::upsample_row_loads; the CPU ignores it).
inline void upsample_backward(const rt::Exec& ex, const kern::Shape4& in, int f, const float* dy, float* dx,
                              bool /*row_loads*/ = false) {
    bool acc;
    if (grad_op({dy}, {dx}, &acc)) kern::upsample_bilinear_backward(ex, in, f, dy, dx, acc);
}
inline void upsample_backward(const rt::Exec& ex, const kern::Shape4& in, int f, const bf16* dy, bf16* dx,
                              bool row_loads = false) {
    bool acc;
    if (grad_op({dy}, {dx}, &acc)) kern::upsample_bilinear_backward_bf16_cuda(ex, in, f, dy, dx, acc, row_loads);
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
    bool acc[2];
    if (grad_op({dy}, {da, db}, acc)) kern::fusion_backward(ex, n, a, b, wa, wb, dy, da, db, dwa, dwb, acc[0], acc[1]);
}
inline void fusion_backward(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, const float* wa,
                            const float* wb, const bf16* dy, bf16* da, bf16* db, float* dwa, float* dwb, float* ws,
                            size_t ws_floats) {
    bool acc[2];
    if (grad_op({dy}, {da, db}, acc))
        kern::fusion_backward_bf16_cuda(ex, n, a, b, wa, wb, dy, da, db, dwa, dwb, ws, ws_floats, acc[0], acc[1]);
}

// ---- the convolution layers' backward (model/layers.cpp) ----

// CPU: dx (+)= act'(x) * dy.
inline void act_backward(const rt::Exec& ex, kern::Act a, size_t n, const float* x, const float* dy, float* dx) {
    bool acc;
    if (grad_op({dy}, {dx}, &acc)) kern::act_backward(ex, a, n, x, dy, dx, acc);
}
// CPU: train-mode BatchNorm backward; dx (+)=, dgamma/dbeta +=.
inline void batchnorm_backward(const rt::Exec& ex, size_t rows, int c, const float* x, const float* dy,
                               const float* gamma, const float* mean, const float* invstd, float* dx, float* dgamma,
                               float* dbeta) {
    bool acc;
    if (grad_op({dy}, {dx}, &acc))
        kern::batchnorm_backward(ex, rows, c, x, dy, gamma, mean, invstd, dx, dgamma, dbeta, acc);
}
// CUDA: fused BN + activation backward. It always overwrites dx: a ConvBN's conv-output gradient,
// whose only writer it is, so the traced flag is always "first contribution". gpu: the rows per loop
// turn and resident blocks (GpuOps::bn_backward_rows), read only when the op runs (a traced backward may have no
// GpuOps).
inline void bn_act_backward(const GpuOps* gpu, const rt::Exec& ex, kern::Act a, size_t rows, int c, const bf16* x,
                            const bf16* dy, const float* gamma, const float* beta, const float* mean,
                            const float* invstd, bf16* dx, float* dgamma, float* dbeta, float* ws, size_t ws_floats,
                            const kern::BnUpsampled* up = nullptr) {
    bool acc;
    if (!grad_op({dy}, {dx}, &acc)) return;
    kern::bn_act_backward(ex, a, rows, c, x, dy, gamma, beta, mean, invstd, dx, dgamma, dbeta, ws, ws_floats,
                          gpu->bn_backward_rows(), up);
}
// CUDA: the dx pass of the BN + activation backward alone, with the coefficients a consumer's fused
// backward gathered (ConvBN::grad_sums_by; dgamma, dbeta were added there). Reported as bn_act_backward.
inline void bn_act_backward_dx(const GpuOps* gpu, const rt::Exec& ex, kern::Act a, size_t rows, int c, const bf16* x,
                               const bf16* dy, const float* gamma, const float* beta, const float* mean,
                               const float* invstd, const float* coef, bf16* dx) {
    bool acc;
    if (!grad_op({dy}, {dx}, &acc)) return;
    kern::bn_act_backward_dx(ex, a, rows, c, x, dy, gamma, beta, mean, invstd, coef, dx, gpu->bn_backward_rows());
}
inline void column_sum(const rt::Exec& ex, size_t rows, int c, const bf16* dy, float* out, float* ws,
                       size_t ws_floats) {
    bool none;
    if (grad_op({dy}, {}, &none)) kern::column_sum_bf16_cuda(ex, rows, c, dy, out, ws, ws_floats);
}
inline void conv_backward_data(const rt::Exec& ex, const kern::ConvShape& s, const float* dy, const float* w,
                               float* dx) {
    bool acc;
    if (grad_op({dy}, {dx}, &acc, &s)) kern::conv_backward_data(ex, s, dy, w, dx, acc);
}
inline void conv_backward_data(const GpuOps* gpu, const rt::Exec& ex, const kern::ConvShape& s, const bf16* dy,
                               const bf16* w, bf16* dx) {
    bool acc;
    if (grad_op({dy}, {dx}, &acc, &s)) gpu->conv_backward_data(ex, s, dy, w, dx, acc);
}
// CUDA: a 1x1 backward-data gathering the preceding BN's backward reductions in its epilogue
// (GpuOps::conv_backward_data_bn_grad): reported as conv_backward_data (the same write).
inline void conv_backward_data_bn_grad(const GpuOps* gpu, const rt::Exec& ex, const kern::ConvShape& s, const bf16* dy,
                                       const bf16* w, bf16* dx, const kern::BnGradSums& bng, float* ws,
                                       size_t ws_floats) {
    bool acc;
    if (grad_op({dy}, {dx}, &acc, &s)) gpu->conv_backward_data_bn_grad(ex, s, dy, w, dx, acc, bng, ws, ws_floats);
}
inline void conv_backward_filter(const rt::Exec& ex, const kern::ConvShape& s, const float* x, const float* dy,
                                 float* dw, float* db) {
    bool none;
    if (grad_op({dy}, {}, &none)) kern::conv_backward_filter(ex, s, x, dy, dw, db);
}
inline void conv_backward_filter(const GpuOps* gpu, const rt::Exec& ex, const kern::ConvShape& s, const bf16* x,
                                 const bf16* dy, float* dw) {
    bool none;
    if (grad_op({dy}, {}, &none)) gpu->conv_backward_filter(ex, s, x, dy, dw);
}
// CUDA: dgrad and wgrad of a depthwise conv in one kernel (GpuOps::dw_fused_backward): reported to the
// tape as conv_backward_data followed by conv_backward_filter, the calls it replaces. pro: the fused
// LiteBlock's BN prologue (x is then the producer's pre-BN output), as dwconv_backward_filter takes it.
inline void conv_backward_fused(const GpuOps* gpu, const rt::Exec& ex, const kern::ConvShape& s, const bf16* x,
                                const bf16* dy, const bf16* w, bf16* dx, float* dw,
                                const kern::DwPrologue* pro = nullptr, const kern::BnGradSums* bng = nullptr) {
    bool acc, none;
    const bool run = grad_op({dy}, {dx}, &acc, &s);
    const bool run_w = grad_op({dy}, {}, &none);
    if (run && run_w) gpu->conv_backward_fused(ex, s, x, dy, w, dx, dw, acc, pro, bng);
}
// CUDA: a depthwise ConvBN's BN + activation backward and the conv's fused backward with the BN's dx
// formed on load (GpuOps::bn_dw_backward_fused); conv_grad is never written. Reported to the tape as
// bn_act_backward, conv_backward_data and conv_backward_filter, the calls it replaces (the same writes),
// with dy also read by the second: the fused kernel reads it while it writes dx.
inline void bn_dw_backward_fused(const GpuOps* gpu, const rt::Exec& ex, kern::Act a, const kern::ConvShape& s,
                                 const bf16* conv_out, const bf16* dy, const float* gamma, const float* beta,
                                 const float* mean, const float* invstd, float* dgamma, float* dbeta,
                                 const bf16* conv_grad, const bf16* x, const bf16* w, bf16* dx, float* dw, float* ws,
                                 size_t ws_floats, const kern::DwPrologue* pro = nullptr,
                                 const kern::BnGradSums* bng = nullptr, const float* given_coef = nullptr) {
    bool acc_bn, acc, none;
    const bool run_bn = grad_op({dy}, {conv_grad}, &acc_bn);
    const bool run = grad_op({conv_grad, dy}, {dx}, &acc, &s);
    const bool run_w = grad_op({conv_grad}, {}, &none);
    if (run_bn && run && run_w)
        gpu->bn_dw_backward_fused(ex, s, a, conv_out, dy, gamma, beta, mean, invstd, dgamma, dbeta, x, w, dx, dw, acc, ws,
                                  ws_floats, pro, bng, given_coef);
}
// CUDA: a 1x1 ConvBN's BN + activation backward with the BN's dx formed in the project's dgrad and wgrad loads
// (GpuOps::bn_pw_backward_fused); conv_grad is never written. Reported to the tape as bn_act_backward,
// conv_backward_data and conv_backward_filter, the calls it replaces (the same writes), with dy also read by
// the second: the dgrad reads it while it writes dx. pro: the 1x1 conv's input BN prologue (x is then the
// producer's pre-BN output; NetShape::fuse_dw_pw), for the wgrad; bng: the producer BN's reductions gathered
// in the same dgrad's epilogue (GpuOps::pw_bn_grad).
inline void bn_pw_backward_fused(const GpuOps* gpu, const rt::Exec& ex, kern::Act a, const kern::ConvShape& s,
                                 const bf16* conv_out, const bf16* dy, const float* gamma, const float* beta,
                                 const float* mean, const float* invstd, float* dgamma, float* dbeta,
                                 const bf16* conv_grad, const bf16* x, const bf16* w, bf16* dx, float* dw, float* ws,
                                 size_t ws_floats, const kern::DwPrologue* pro = nullptr,
                                 const float* given_coef = nullptr, const kern::BnGradSums* bng = nullptr) {
    bool acc_bn, acc, none;
    const bool run_bn = grad_op({dy}, {conv_grad}, &acc_bn);
    const bool run = grad_op({conv_grad, dy}, {dx}, &acc, &s);
    const bool run_w = grad_op({conv_grad, dy}, {}, &none);
    if (run_bn && run && run_w)
        gpu->bn_pw_backward_fused(ex, s, a, conv_out, dy, gamma, beta, mean, invstd, dgamma, dbeta, x, w, dx, dw, acc, ws,
                                  ws_floats, pro, given_coef, bng);
}
// CUDA: the backward-filter of a conv with its input's BN prologue (x_pre: the producer's pre-BN output),
// the project's kernel whatever GpuOps picked for the shape's other passes: the depthwise conv of the
// fused LiteBlock (NetShape::fuse_expand_dw) or a 1x1 conv after a depthwise one (NetShape::fuse_dw_pw).
inline void conv_backward_filter_prologue(const rt::Exec& ex, const kern::ConvShape& s, const bf16* x_pre,
                                          const bf16* dy, float* dw, float* ws, size_t ws_floats,
                                          const kern::DwPrologue& pro) {
    bool none;
    if (!grad_op({dy}, {}, &none)) return;
    if (s.k == 1)
        kern::pwconv_backward_filter_cuda(ex, s, x_pre, dy, dw, ws, ws_floats, &pro);
    else
        kern::dwconv3x3_backward_filter_cuda(ex, s, x_pre, dy, dw, ws, ws_floats, &pro);
}
// CUDA: the heads' last 1x1 conv (fp32 dy, the logits' gradient).
// Returns whether it ran (bng: the prologue BN's reductions, kern::HeadBnGrad, for the caller to finalize then).
// store_dx false (kern::ConvPolicy::head_bn_dx, with bng): dx is not written (head_bn_dx below forms it where it is
// read); reported as the write it replaces.
inline bool head_conv_backward(const rt::Exec& ex, size_t rows, int cin, int cout, const bf16* x, const float* dy,
                               const float* w, bf16* dx, float* dw, float* db, float* ws, size_t ws_floats,
                               const kern::DwPrologue* pro = nullptr, const kern::HeadBnGrad* bng = nullptr,
                               bool store_dx = true) {
    bool acc;
    if (!grad_op({dy}, {dx}, &acc)) return false;
    SF_CHECK(store_dx || !acc, "head_conv_backward: a dx not stored cannot accumulate");
    kern::head_conv_backward_cuda(ex, rows, cin, cout, x, dy, w, store_dx ? dx : nullptr, dw, db, ws, ws_floats, acc, 0,
                                  pro, bng);
    return true;
}
// CUDA: the heads' conv1 BN's dx pass with its dy formed from the conv2s' logits' gradients (kern::head_bn_dx_cuda;
// kern::ConvPolicy::head_bn_dx): reported as bn_act_backward_dx on the dy the conv2s would have stored, reading
// their logits' gradients as well (up to 4; null entries ignored).
inline void head_bn_dx(const rt::Exec& ex, kern::Act a, size_t rows, int c, const bf16* x, const bf16* dy,
                       const kern::HeadDxSource* src, int n, const float* gamma, const float* beta, const float* mean,
                       const float* invstd, const float* coef, bf16* dx) {
    SF_CHECK(n >= 1 && n <= 4, "head_bn_dx: %d sources", n);
    const float* l[4] = {};
    for (int i = 0; i < n; ++i) l[i] = src[i].dy;
    bool acc;
    if (!grad_op({dy, l[0], l[1], l[2], l[3]}, {dx}, &acc)) return;
    kern::head_bn_dx_cuda(ex, a, rows, c, src, n, x, gamma, beta, mean, invstd, coef, dx);
}

}  // namespace model::ops
