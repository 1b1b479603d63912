// CUDA decoding (MODEL_SPEC §1.7) and validation metric sums (§3.5): model/decode_cuda.h.
// decode_ref's float arithmetic is kept operation for operation (no contraction into FMA where the
// reference rounds in between: mul_rn), so the coordinates equal the reference's for the same
// fp32 heatmaps and offsets. The argmax is a block reduction over (value, index) pairs with a total
// order that makes any reduction tree return what the reference's sequential scan returns.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "model/decode_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace model {

namespace {

// ---- helpers (__host__ __device__: one definition of the per-cell math) ----
#define SF_HD __host__ __device__ __forceinline__

// The heads' activations, in double, rounded once to fp32.
SF_HD float heat_of(float z) { return static_cast<float>(1.0 / (1.0 + exp(-double(z)))); }
SF_HD float offset_of(float z) { return static_cast<float>(0.5 * tanh(double(z))); }
SF_HD float clampf(float v, float lo, float hi) { return v < lo ? lo : (hi < v ? hi : v); }
// a * b rounded on its own: never contracted into an FMA with a following add (decode_ref rounds du).
SF_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

// (v, i) comes before (bv, bi) in torch.argmax order: NaN first (the lowest-index NaN), then the
// larger value, equal values by the lower index. A total order, so the winner of any reduction tree
// is the reference's first maximum. The start value (-inf, INT_MAX) loses to every real cell.
SF_HD bool beats(float v, int i, float bv, int bi) {
    const bool nv = isnan(v), nb = isnan(bv);
    if (nv || nb) return nv && (!nb || i < bi);
    if (v != bv) return v > bv;
    return i < bi;
}

// One object's maps in one sample.
struct ObjectMaps {
    const float* z;   // (h,w) heatmap logits
    const float* zo;  // (h,w,4) offset logits, channels ch, ch+1
    int ch;
    const float* vm;  // (h,w) valid_min or null
    int h, w, stride;

    // masked_fill((1 - valid_min) > 0.01, -inf), as decode_ref.
    SF_HD float value(int i) const { return vm && 1.0f - vm[i] > 0.01f ? -INFINITY : heat_of(z[i]); }

    // decode_ref's coords(): offsets multiplied by the mask, clamped to the letterbox.
    SF_HD void coords(int i, float* x, float* y) const {
        const int row = i / w, col = i % w;
        const float m = vm ? vm[i] : 1.0f;
        const float du = mul_rn(offset_of(zo[4 * i + ch]), m), dv = mul_rn(offset_of(zo[4 * i + ch + 1]), m);
        *x = clampf((col + 0.5f + du) * stride, 0.0f, float(w * stride));
        *y = clampf((row + 0.5f + dv) * stride, 0.0f, float(h * stride));
    }
};

struct Peak {
    float score;
    int index;
};

// Argmax over rows r0..r1 (all columns) of one object; the result in every thread. Every thread of
// the block must call it. sv, si: kDecodeThreads / 32 slots of shared memory; *out: shared.
__device__ Peak block_argmax(const ObjectMaps& o, int r0, int r1, float* sv, int* si, Peak* out) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = r0 * o.w + static_cast<int>(threadIdx.x); i < (r1 + 1) * o.w; i += blockDim.x) {
        const float v = o.value(i);
        if (beats(v, i, bv, bi)) bv = v, bi = i;
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        const float ov = __shfl_down_sync(0xffffffffu, bv, d);
        const int oi = __shfl_down_sync(0xffffffffu, bi, d);
        if (beats(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < static_cast<int>(blockDim.x >> 5); ++k)
            if (beats(sv[k], si[k], bv, bi)) bv = sv[k], bi = si[k];
        out->score = bv;
        out->index = bi;
    }
    __syncthreads();
    const Peak p = *out;
    __syncthreads();  // *out, sv, si are reused by the next call
    return p;
}

// ---- kernels ----

// grid n, block kDecodeThreads: sample blockIdx.x. decode_ref's steps; every thread follows the same
// (uniform) control flow, thread 0 writes the record.
__global__ void __launch_bounds__(kDecodeThreads)
    decode_kernel(int h, int w, int stride, const float* __restrict__ zg, const float* __restrict__ zs,
                  const float* __restrict__ zo, const float* __restrict__ vm, Decoded* __restrict__ out) {
    rt::pdl_entry();
    __shared__ float sv[kDecodeThreads / 32];
    __shared__ int si[kDecodeThreads / 32];
    __shared__ Peak bcast;
    const size_t hw = static_cast<size_t>(h) * w, b = blockIdx.x;
    const float* vmb = vm ? vm + b * hw : nullptr;
    const ObjectMaps gap{zg + b * hw, zo + 4 * b * hw, 0, vmb, h, w, stride};
    const ObjectMaps slider{zs + b * hw, zo + 4 * b * hw, 2, vmb, h, w, stride};
    const Peak pg = block_argmax(gap, 0, h - 1, sv, si, &bcast);
    const Peak ps = block_argmax(slider, 0, h - 1, sv, si, &bcast);
    Decoded d;
    gap.coords(pg.index, &d.gap_x, &d.gap_y);
    slider.coords(ps.index, &d.slider_x, &d.slider_y);
    d.gap_score = pg.score;
    d.slider_score = ps.score;

    // Row alignment: the stronger object (slider on ties, and on NaN) fixes the row; the other is
    // re-searched in rows r-1..r+1. rintf rounds half to even, as torch.round.
    const bool gap_ref = pg.score > ps.score;
    const float y_ref = gap_ref ? d.gap_y : d.slider_y;
    const float r_f = rintf(y_ref / float(stride) - 0.5f);
    const int r = isnan(r_f) ? 0 : static_cast<int>(clampf(r_f, 0.0f, float(h - 1)));
    const int r0 = r - 1 > 0 ? r - 1 : 0, r1 = r + 1 < h - 1 ? r + 1 : h - 1;
    const ObjectMaps& other = gap_ref ? slider : gap;
    const Peak p2 = block_argmax(other, r0, r1, sv, si, &bcast);
    if (gap_ref)
        slider.coords(p2.index, &d.slider_x, &d.slider_y);
    else
        gap.coords(p2.index, &d.gap_x, &d.gap_y);
    if (threadIdx.x == 0) out[b] = d;
}

// One block of kMetricsThreads: chunks of kMetricsThreads samples; thread t computes sample_error of
// its sample, thread 0 adds the chunk in sample order with Metrics::add's operations.
__global__ void __launch_bounds__(kMetricsThreads)
    metrics_kernel(int n_real, const Decoded* __restrict__ dec, const data::Label* __restrict__ labels,
                   DeviceMetricSums* acc) {
    rt::pdl_entry();
    __shared__ double eg[kMetricsThreads], es[kMetricsThreads], ec[kMetricsThreads];
    DeviceMetricSums s{};
    if (threadIdx.x == 0) s = *acc;
    for (int base = 0; base < n_real; base += kMetricsThreads) {
        const int i = base + static_cast<int>(threadIdx.x);
        if (i < n_real) {
            const Decoded& d = dec[i];
            const data::Label& l = labels[i];
            const double gap = 0.5 * (fabs(double(d.gap_x) - l.gap_x) + fabs(double(d.gap_y) - l.gap_y));
            const double sl = 0.5 * (fabs(double(d.slider_x) - l.slider_x) + fabs(double(d.slider_y) - l.slider_y));
            eg[threadIdx.x] = gap;
            es[threadIdx.x] = sl;
            ec[threadIdx.x] = 0.5 * (gap + sl);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            const int m = n_real - base < kMetricsThreads ? n_real - base : kMetricsThreads;
            for (int k = 0; k < m; ++k) {
                const double c = ec[k];
                ++s.n;
                s.sum = __dadd_rn(s.sum, c);
                s.sum_sq = __dadd_rn(s.sum_sq, __dmul_rn(c, c));  // no FMA: Metrics rounds c*c first
                s.sum_gap = __dadd_rn(s.sum_gap, eg[k]);
                s.sum_slider = __dadd_rn(s.sum_slider, es[k]);
                s.hit2 += c <= 2.0;
                s.hit5 += c <= 5.0;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) *acc = s;
}

}  // namespace

// ---- launchers ----

void decode_cuda(const rt::Exec& ex, int n, int h, int w, int stride, const float* logit_gap, const float* logit_slider,
                 const float* logit_offset, const float* valid_min, Decoded* out) {
    rt::check_cuda_exec("decode_cuda", ex);
    SF_CHECK(n > 0 && h > 0 && w > 0 && stride > 0, "decode_cuda: bad decode shape (%d,%d,%d) stride %d", n, h, w,
             stride);
    SF_CHECK(static_cast<size_t>(h) * w < (size_t(1) << 31) / 4, "decode_cuda: grid %dx%d too large", h, w);
    SF_CHECK(rt::aligned(logit_gap, 4) && rt::aligned(logit_slider, 4),
             "decode_cuda: heatmap logits must be non-null, 4-byte aligned device pointers");
    SF_CHECK(rt::aligned(logit_offset, 4),
             "decode_cuda: offset logits must be a non-null, 4-byte aligned device pointer");
    SF_CHECK(!valid_min || rt::aligned(valid_min, 4), "decode_cuda: misaligned valid_min");
    SF_CHECK(rt::aligned(out, alignof(Decoded)), "decode_cuda: null or misaligned output");
    rt::launch(ex, "decode_kernel", decode_kernel, n, kDecodeThreads, 0, h, w, stride, logit_gap, logit_slider,
               logit_offset, valid_min, out);
}

void metrics_accumulate_cuda(const rt::Exec& ex, int n_real, const Decoded* decoded, const data::Label* labels,
                             DeviceMetricSums* acc) {
    rt::check_cuda_exec("metrics_accumulate_cuda", ex);
    SF_CHECK(n_real >= 0, "metrics_accumulate_cuda: n_real=%d is negative", n_real);
    SF_CHECK(rt::aligned(decoded, alignof(Decoded)) && rt::aligned(labels, alignof(data::Label)),
             "metrics_accumulate_cuda: null or misaligned decoded / labels");
    SF_CHECK(rt::aligned(acc, 8), "metrics_accumulate_cuda: null or misaligned acc");
    rt::launch(ex, "metrics_kernel", metrics_kernel, 1, kMetricsThreads, 0, n_real, decoded, labels, acc);
}

}  // namespace model

#undef SF_HD
