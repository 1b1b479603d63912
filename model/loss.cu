// CUDA fused training loss (model/loss_cuda.h, docs/LOSS.md "GPU loss kernel") and the grid masks
// pooled from the network input. Mirrors the double CPU reference (model/loss.cpp, loss_terms.cpp,
// targets.cpp) operation for operation: every per-cell formula (here and in loss_device.cuh) is the
// reference's, in double, on the fp32 logits; the reference's loops over the batch become the 4
// launches of loss_cuda.h.
//
// Per-cell math lives in __host__ __device__ functions (SF_HD, model/loss_device.cuh with the record
// layouts and the launch 1/2 parts, model/loss_batch.cuh with launch 3's) so that it is one
// definition for all kernels; the kernels add only indexing and fixed-order reductions:
//   block_sum      warp shuffle tree (fixed shape) per warp, then thread 0 adds the warp sums in
//                  warp order: the same bits on every run and every device.
//   sequential     where the reference's order matters for a data-dependent decision (the Y-axis
//                  softmax / cumulative sums / sign of the EMD difference), one thread loops in the
//                  reference's order over shared memory.
// Integer atomics (shared memory) count fakes; no floating-point atomics anywhere.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "model/loss_batch.cuh"  // launch 3: batch combination
#include "model/loss_cuda.h"
#include "model/loss_device.cuh"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace model {

namespace {

using bfloat = __nv_bfloat16;

// ---- launch 4: gradients ----

// d total / d logits of cell k, overwritten. Terms in the reference's order of accumulation.
SF_HD void grad_cell(const LossArgs& a, size_t k) {
    const LossConfig& c = a.cfg;
    const int hw = a.hw();
    const int b = static_cast<int>(k / hw), cell = static_cast<int>(k % hw), r = cell / a.w, j = cell % a.w;
    const double* bt = a.batch;
    const double* cf = a.coefs + static_cast<size_t>(b) * kLossCoefSlots;
    const data::Label& l = a.labels[b];
    const SampleCtx s = sample_ctx(a, b);
    const double m = a.m[k];
    const double pg = sigmoid(a.zg[k]), ps = sigmoid(a.zs[k]);
    const double yg = heat_target(s.gap, s.t, r, j), ys = heat_target(s.slider, s.t, r, j);
    const float4 zo = reinterpret_cast<const float4*>(a.zo)[k];
    const double zoff[4] = {zo.x, zo.y, zo.z, zo.w};
    double gpg = 0, gps = 0, goff[4] = {0, 0, 0, 0}, gang[2] = {0, 0}, dl;

    if (bt[kBScFocalG] != 0) {
        focal_cell(c, pg, yg, &dl);
        gpg += bt[kBScFocalG] * cf[kCoefFocalG] * m * dl;
    }
    if (bt[kBScFocalS] != 0) {
        focal_cell(c, ps, ys, &dl);
        gps += bt[kBScFocalS] * cf[kCoefFocalS] * m * dl;
    }
    for (int obj = 0; obj < 2; ++obj) {  // offset
        const double sc = bt[obj ? kBScOffS : kBScOffG], norm = bt[obj ? kBOffNormS : kBOffNormG];
        if (sc == 0) continue;
        const ObjectCell& oc = obj ? s.slider : s.gap;
        const bool peak = r == oc.v && j == oc.u;
        if (a.corrected() && !(peak && !(m < kOffsetMinWeight))) continue;  // supported peak cells only
        // `sider`: wt / wsum over the whole window (quirk 4); corrected: 1 / supported samples.
        const double coef = a.corrected() ? 1.0 / norm : (obj ? ys : yg) * m / norm;
        double dx, dy;
        smooth_l1(0.5 * tanh(zoff[2 * obj]) - (peak ? oc.du : 0.0), c.offset_beta, &dx);
        smooth_l1(0.5 * tanh(zoff[2 * obj + 1]) - (peak ? oc.dv : 0.0), c.offset_beta, &dy);
        goff[2 * obj] += sc * coef * dx;
        goff[2 * obj + 1] += sc * coef * dy;
    }
    if (bt[kBScHn] != 0) {  // hard negative: the sampled corners of the gap map
        const int st = c.stride;
        double wt;
        if (cf[kCoefHnGap] != 0 && bilinear_corner(a.h, a.w, double(l.gap_x) / st, double(l.gap_y) / st, r, j, &wt))
            gpg += cf[kCoefHnGap] * wt;
        const int nf = clamp_fakes(l.num_fakes);
        for (int slot = 0; slot < data::kMaxFakeGaps; ++slot) {
            const double cc = cf[kCoefHnFake0 + slot];
            if (cc == 0) continue;
            double fx = 0, fy = 0;
            if (nf > 0) fake_grid_coords(c.variant, l, slot, st, &fx, &fy);
            if (bilinear_corner(a.h, a.w, fx, fy, r, j, &wt)) gpg += cc * wt;
        }
    }
    if (bt[kBScAngle] != 0 && cf[kCoefAngle] != 0) {
        const double wt = (yg > c.angle_pos_threshold ? 1.0 : 0.0) * m;
        if (wt != 0) {
            const double th = l.angle_rad, sc = bt[kBScAngle];
            gang[0] -= sc * cf[kCoefAngle] * wt * sin(th);
            gang[1] -= sc * cf[kCoefAngle] * wt * cos(th);
        }
    }
    if (bt[kBScPad] != 0) {
        double dg, ds;
        pad_cell(c, pg, &dg);
        pad_cell(c, ps, &ds);
        gpg += bt[kBScPad] * cf[kCoefPad] * (1 - m) * dg;
        gps += bt[kBScPad] * cf[kCoefPad] * (1 - m) * ds;
    }
    if (bt[kBScY] != 0) {
        const double* yr = a.yrow + (static_cast<size_t>(b) * a.h + r) * kLossYRowSlots;
        gpg += bt[kBScY] * yr[0] / a.w;
        gps += bt[kBScY] * yr[1] / a.w;
    }

    // Through the activations (backward_activations of loss.cpp).
    a.gg[k] = static_cast<float>(chain(gpg, pg * (1 - pg)));
    a.gs[k] = static_cast<float>(chain(gps, ps * (1 - ps)));
    double go[4];
    for (int ch = 0; ch < 4; ++ch) {
        const double th = tanh(zoff[ch]);
        go[ch] = chain(goff[ch], 0.5 * (1 - th * th));
    }
    reinterpret_cast<float4*>(a.go)[k] = make_float4(static_cast<float>(go[0]), static_cast<float>(go[1]),
                                                     static_cast<float>(go[2]), static_cast<float>(go[3]));
    double g0[2] = {0, 0};
    if (gang[0] != 0 || gang[1] != 0) {
        const float2 za = reinterpret_cast<const float2*>(a.za)[k];
        const double z2[2] = {za.x, za.y};
        double a1[2], g1[2];
        normalize2(z2, a1);
        normalize2_backward(a1, gang, g1);  // the loss's normalisation
        normalize2_backward(z2, g1, g0);    // the head's
    }
    reinterpret_cast<float2*>(a.ga)[k] = make_float2(static_cast<float>(g0[0]), static_cast<float>(g0[1]));
}

// ---- device-only helpers ----

// Sums v[0..K) over the block in a fixed order: a shuffle tree per warp, then thread 0 adds the warp
// sums in warp order. Valid in thread 0. blockDim.x a multiple of 32; every thread must call it;
// smem holds (blockDim.x / 32) * K doubles.
template <int K>
__device__ void block_sum(double (&v)[K], double* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
    for (int q = 0; q < K; ++q) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v[q] += __shfl_down_sync(0xffffffffu, v[q], o);
    }
    if (lane == 0) {
#pragma unroll
        for (int q = 0; q < K; ++q) smem[warp * K + q] = v[q];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int q = 0; q < K; ++q) {
            double s = smem[q];
            for (int i = 1; i < warps; ++i) s += smem[i * K + q];
            v[q] = s;
        }
    }
}

// ---- kernels ----

// Launch 1. grid n*h (block = one grid row), block loss_row_threads(w): threads over the row's cells.
__global__ void __launch_bounds__(kLossRowMaxThreads) loss_rows_kernel(LossArgs a) {
    rt::pdl_entry();
    __shared__ double smem[(kLossRowMaxThreads / 32) * kRowSlotCount];
    const int b = blockIdx.x / a.h, r = blockIdx.x % a.h;
    const SampleCtx s = sample_ctx(a, b);
    double acc[kRowSlotCount] = {};
    for (int j = threadIdx.x; j < a.w; j += blockDim.x) row_cell(a, s, b, r, j, acc);
    block_sum(acc, smem);
    if (threadIdx.x == 0) {
        double* out = a.rows + static_cast<size_t>(blockIdx.x) * kLossRowSlots;
#pragma unroll
        for (int q = 0; q < kRowSlotCount; ++q) out[q] = acc[q];
    }
}

// Launch 2. grid n (block = one sample), block kLossSampleThreads. Phases separated by barriers;
// threads 0 / 32 / 64 (three different warps) run the sequential parts side by side.
__global__ void __launch_bounds__(kLossSampleThreads) loss_sample_kernel(LossArgs a) {
    rt::pdl_entry();
    __shared__ double eg[kLossMaxRows], dg[kLossMaxRows], es[kLossMaxRows], ds[kLossMaxRows];
    __shared__ double gg[kLossMaxRows], gs[kLossMaxRows];
    __shared__ double mx_g, mx_s, z_g, z_s, dot_g, dot_s;
    __shared__ int kmax, with_fakes;
    const int b = blockIdx.x, t = threadIdx.x, h = a.h;
    const double* rows = a.rows + static_cast<size_t>(b) * h * kLossRowSlots;
    double* rec = a.samples + static_cast<size_t>(b) * kLossSampleSlots;

    if (t == 0) kmax = 0, with_fakes = 0;
    for (int r = t; r < h; r += blockDim.x) y_row_init(a, rows + r * kLossRowSlots, &eg[r], &dg[r], &es[r], &ds[r]);
    if (t < kRowSummed) {  // row sums of the sample record, in row order
        double s = 0;
#pragma unroll 8
        for (int r = 0; r < h; ++r) s += rows[r * kLossRowSlots + t];
        rec[t] = s;
    }
    __syncthreads();
    for (int i = t; i < a.n; i += blockDim.x) {  // integer atomics: exact in any order
        const int nf = clamp_fakes(a.labels[i].num_fakes);
        atomicMax(&kmax, nf);
        if (nf > 0) atomicAdd(&with_fakes, 1);
    }
    if (t == 0) mx_g = seq_max(dg, h);
    if (t == 32) mx_s = seq_max(ds, h);
    __syncthreads();
    for (int r = t; r < h; r += blockDim.x) dg[r] = exp(dg[r] - mx_g), ds[r] = exp(ds[r] - mx_s);
    __syncthreads();
    if (t == 0) z_g = seq_sum(dg, h);
    if (t == 32) z_s = seq_sum(ds, h);
    __syncthreads();
    for (int r = t; r < h; r += blockDim.x) dg[r] /= z_g, ds[r] /= z_s;
    __syncthreads();
    if (t == 0) y_sample_tail(a, b, dg, ds, gg, gs, &rec[kSmpCe], &rec[kSmpEmd], &dot_g, &dot_s);
    if (t == 32) hn_sample(a, b, kmax, with_fakes, rec);
    if (t == 64) offset_peaks(a, b, rec);
    __syncthreads();
    double* yrow = a.yrow + static_cast<size_t>(b) * h * kLossYRowSlots;
    for (int r = t; r < h; r += blockDim.x) {
        yrow[r * kLossYRowSlots] = y_row_grad(a.cfg, dg[r], gg[r], dot_g, eg[r]);
        yrow[r * kLossYRowSlots + 1] = y_row_grad(a.cfg, ds[r], gs[r], dot_s, es[r]);
    }
}

// Launch 3. One block of kLossBatchThreads: thread t sums samples t, t + 256, ... in order, then a
// fixed block tree; thread 0 assembles the terms; then threads write the per-sample coefficients.
__global__ void __launch_bounds__(kLossBatchThreads) loss_batch_kernel(LossArgs a) {
    rt::pdl_entry();
    __shared__ double smem[(kLossBatchThreads / 32) * kBatchQCount];
    __shared__ BatchScalars bs;
    double q[kBatchQCount] = {};
    for (int b = threadIdx.x; b < a.n; b += blockDim.x) batch_parts(a, b, q);
    block_sum(q, smem);
    if (threadIdx.x == 0) batch_finalize(a, q, &bs);
    __syncthreads();
    for (int b = threadIdx.x; b < a.n; b += blockDim.x) sample_coefs(a, b, bs);
}

// Launch 4. One thread per cell.
__global__ void __launch_bounds__(kLossGradThreads) loss_grad_kernel(LossArgs a, size_t cells) {
    rt::pdl_entry();
    const size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k < cells) grad_cell(a, k);
}

// Mask pooling: one thread per grid cell, the cell's stride x stride pixels in the references' order
// (rows, then columns); the average in double as mask_grid_avg_ref, the min as mask_grid_min_ref.
__global__ void __launch_bounds__(kMaskGridThreads)
    mask_grid_kernel(size_t cells, int h, int w, int H, int W, int C, int mask_c, int stride,
                     const bfloat* __restrict__ input, float* __restrict__ avg, float* __restrict__ mn) {
    rt::pdl_entry();
    const size_t cell = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (cell >= cells) return;
    const int j = static_cast<int>(cell % w), i = static_cast<int>((cell / w) % h);
    const size_t b = cell / (static_cast<size_t>(h) * w);
    double sum = 0;
    float lo = INFINITY;
    for (int dy = 0; dy < stride; ++dy) {
        const size_t row = (b * H + static_cast<size_t>(i) * stride + dy) * W + static_cast<size_t>(j) * stride;
        for (int dx = 0; dx < stride; ++dx) {
            const float v = __bfloat162float(input[(row + dx) * C + mask_c]);
            sum += v;
            lo = v < lo ? v : lo;  // std::min(lo, v)
        }
    }
    if (avg) avg[cell] = static_cast<float>(sum * (1.0 / (double(stride) * stride)));
    if (mn) mn[cell] = lo;
}

// ---- launch helpers ----

void check_ptr(const char* name, const void* p, size_t align) {
    rt::check_device_ptr("loss_forward_backward_cuda", name, p, align);
}

void check_config(const LossConfig& cfg) {
    SF_CHECK(cfg.stride > 0 && cfg.sigma > 0 && cfg.y_tau > 0, "bad loss config: stride %d sigma %g tau %g", cfg.stride,
             cfg.sigma, cfg.y_tau);
}

}  // namespace

// ---- launchers ----

LossPlan loss_plan(int n, int h, int w) {
    SF_CHECK(n >= 1, "loss: batch n=%d must be at least 1", n);
    SF_CHECK(h >= 1 && w >= 1, "loss: bad grid h=%d w=%d", h, w);
    SF_CHECK(h <= kLossMaxRows, "loss: grid h=%d exceeds kLossMaxRows=%d", h, kLossMaxRows);
    const size_t cells = static_cast<size_t>(n) * h * w;
    SF_CHECK(cells < (size_t(1) << 31), "loss: n*h*w=%zu cells exceed 2^31", cells);
    LossPlan p;
    p.n = n, p.h = h, p.w = w;
    p.cells = cells;
    p.row_blocks = n * h;
    p.row_threads = loss_row_threads(w);
    p.sample_blocks = n;
    p.grad_blocks = static_cast<int>((cells + kLossGradThreads - 1) / kLossGradThreads);
    size_t off = 0;
    p.off_rows = off;
    off += loss_region_bytes(static_cast<size_t>(n) * h * kLossRowSlots);
    p.off_yrow = off;
    off += loss_region_bytes(static_cast<size_t>(n) * h * kLossYRowSlots);
    p.off_samples = off;
    off += loss_region_bytes(static_cast<size_t>(n) * kLossSampleSlots);
    p.off_coefs = off;
    off += loss_region_bytes(static_cast<size_t>(n) * kLossCoefSlots);
    p.off_batch = off;
    off += loss_region_bytes(kLossBatchSlots);
    p.workspace_bytes = off;
    return p;
}

size_t loss_workspace_bytes(const LossConfig& cfg, int n, int h, int w) {
    check_config(cfg);
    return loss_plan(n, h, w).workspace_bytes;
}

void mask_grid_cuda(const rt::Exec& ex, int n, int H, int W, int C, int mask_c, int stride, const kern::bf16* input,
                    float* valid_avg, float* valid_min) {
    rt::check_cuda_exec("mask_grid_cuda", ex);
    SF_CHECK(n > 0 && H > 0 && W > 0 && C > 0, "mask_grid_cuda: bad input shape (%d,%d,%d,%d)", n, H, W, C);
    SF_CHECK(mask_c >= 0 && mask_c < C, "mask_grid_cuda: mask channel %d outside 0..%d", mask_c, C - 1);
    SF_CHECK(stride > 0 && H % stride == 0 && W % stride == 0,
             "mask_grid_cuda: input %dx%d is not a multiple of stride %d", H, W, stride);
    SF_CHECK(rt::aligned(input, 2), "mask_grid_cuda: null or misaligned input");
    SF_CHECK(valid_avg || valid_min, "mask_grid_cuda: both outputs are null");
    SF_CHECK((!valid_avg || rt::aligned(valid_avg, 4)) && (!valid_min || rt::aligned(valid_min, 4)),
             "mask_grid_cuda: misaligned output");
    const int h = H / stride, w = W / stride;
    const size_t cells = static_cast<size_t>(n) * h * w;
    rt::launch(ex, "mask_grid_kernel", mask_grid_kernel, static_cast<unsigned>(mask_grid_blocks(cells)),
               kMaskGridThreads, 0, cells, h, w, H, W, C, mask_c, stride, reinterpret_cast<const bfloat*>(input),
               valid_avg, valid_min);
}

void loss_forward_backward_cuda(const rt::Exec& ex, const LossConfig& cfg, const HeadLogits<float>& logits,
                                const float* valid_avg, const data::Label* labels, const HeadGrads<float>* grads,
                                double grad_scale, DeviceLossTerms* out, double* loss_sum, void* workspace,
                                size_t workspace_bytes) {
    rt::check_cuda_exec("loss_forward_backward_cuda", ex);
    check_config(cfg);
    const LossPlan p = loss_plan(logits.n, logits.h, logits.w);
    check_ptr("logits.gap", logits.gap, 4);
    check_ptr("logits.slider", logits.slider, 4);
    check_ptr("logits.offset", logits.offset, 16);
    check_ptr("logits.angle", logits.angle, 8);
    check_ptr("valid_avg", valid_avg, 4);
    check_ptr("labels", labels, alignof(data::Label));
    check_ptr("out", out, 8);
    if (loss_sum) check_ptr("loss_sum", loss_sum, 8);
    check_ptr("workspace", workspace, kLossRegionAlign);
    SF_CHECK(workspace_bytes >= p.workspace_bytes,
             "loss_forward_backward_cuda: workspace of %zu bytes is too small for n=%d h=%d w=%d (need "
             "loss_workspace_bytes = %zu)",
             workspace_bytes, p.n, p.h, p.w, p.workspace_bytes);
    if (grads) {
        check_ptr("grads->gap", grads->gap, 4);
        check_ptr("grads->slider", grads->slider, 4);
        check_ptr("grads->offset", grads->offset, 16);
        check_ptr("grads->angle", grads->angle, 8);
        SF_CHECK(grads->gap != logits.gap && grads->slider != logits.slider && grads->offset != logits.offset &&
                     grads->angle != logits.angle,
                 "loss_forward_backward_cuda: grads must not alias the logits");
    }

    LossArgs a{};
    a.cfg = cfg;
    a.n = p.n, a.h = p.h, a.w = p.w;
    a.grad_scale = grad_scale;
    a.zg = logits.gap, a.zs = logits.slider, a.zo = logits.offset, a.za = logits.angle;
    a.m = valid_avg;
    a.labels = labels;
    char* ws = static_cast<char*>(workspace);
    a.rows = reinterpret_cast<double*>(ws + p.off_rows);
    a.yrow = reinterpret_cast<double*>(ws + p.off_yrow);
    a.samples = reinterpret_cast<double*>(ws + p.off_samples);
    a.coefs = reinterpret_cast<double*>(ws + p.off_coefs);
    a.batch = reinterpret_cast<double*>(ws + p.off_batch);
    if (grads) a.gg = grads->gap, a.gs = grads->slider, a.go = grads->offset, a.ga = grads->angle;
    a.out = out;
    a.loss_sum = loss_sum;

    rt::launch(ex, "loss_rows_kernel", loss_rows_kernel, p.row_blocks, p.row_threads, 0, a);
    rt::launch(ex, "loss_sample_kernel", loss_sample_kernel, p.sample_blocks, kLossSampleThreads, 0, a);
    rt::launch(ex, "loss_batch_kernel", loss_batch_kernel, 1, kLossBatchThreads, 0, a);
    if (grads) {
        rt::launch(ex, "loss_grad_kernel", loss_grad_kernel, p.grad_blocks, kLossGradThreads, 0, a, p.cells);
    }
}

}  // namespace model

#undef SF_HD
