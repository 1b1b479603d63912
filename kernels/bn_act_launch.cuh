// What the two BatchNorm + activation launcher files share (kernels/bn_act.cu: the statistics, apply
// and forward launchers; kernels/bn_act_backward.cu: the backward): the finalize kernels' fixed-order
// fp64 sum and the launchers' argument checks and template dispatch. Included by those two files only
// (kernels/bn_act_rows.cuh is the same arrangement). Design: docs/KERNELS_BN_ACT.md.
#pragma once

#include <cstddef>
#include <type_traits>

#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_rows.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/upsample_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch_check.h"

namespace kern {

namespace {

constexpr int kFinalizeX = 32;  // channels per finalize block
constexpr int kFinalizeY = 8;   // chunk lanes per finalize block

// Chunks per lane whose partials the row_batch 4 finalize loads before adding the first of them.
constexpr int kFinalizeBatch = 16;

// Per-channel fixed-order fp64 sums over the chunks of both partial arrays, for channel
// blockIdx.x * 32 + threadIdx.x; valid in threads with threadIdx.y == 0. Block (32, 8): lane y adds
// chunks y, y + 8, ...; then lane 0 adds the 8 lane sums in order.
// R == 1 (the measured kernels): each chunk's two partials are loaded and added before the next
// chunk's are loaded (ptxas issues 8 loads per round trip: 16 round trips for 512 chunks).
// R == 4 (with the row kernels' row_batch 4): a lane loads kFinalizeBatch chunks' partials (32 loads)
// before adding the first, then adds them in the same order, so the sums are the same bits; a chunk
// past the end loads nothing and adds +0.0, which leaves a sum that started at +0.0 unchanged (such a
// sum is never -0.0). 4 round trips for 512 chunks.
template <int R>
__device__ __forceinline__ void finalize_sums(int c, int chunks, const float* __restrict__ part, double& s0,
                                              double& s1) {
    __shared__ double sm[2][kFinalizeY][kFinalizeX];
    const int ch = blockIdx.x * kFinalizeX + threadIdx.x;
    s0 = 0.0;
    s1 = 0.0;
    if (ch < c) {
        if constexpr (R == 1) {
            for (int k = threadIdx.y; k < chunks; k += kFinalizeY) {
                s0 += static_cast<double>(part[static_cast<size_t>(k) * c + ch]);
                s1 += static_cast<double>(part[static_cast<size_t>(chunks + k) * c + ch]);
            }
        } else {
            for (int k0 = threadIdx.y; k0 < chunks; k0 += kFinalizeBatch * kFinalizeY) {
                float a[kFinalizeBatch], b[kFinalizeBatch];
#pragma unroll
                for (int u = 0; u < kFinalizeBatch; ++u) {
                    const int k = k0 + u * kFinalizeY;
                    a[u] = k < chunks ? part[static_cast<size_t>(k) * c + ch] : 0.0f;
                    b[u] = k < chunks ? part[static_cast<size_t>(chunks + k) * c + ch] : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < kFinalizeBatch; ++u) {
                    s0 += static_cast<double>(a[u]);
                    s1 += static_cast<double>(b[u]);
                }
            }
        }
    }
    sm[0][threadIdx.y][threadIdx.x] = s0;
    sm[1][threadIdx.y][threadIdx.x] = s1;
    __syncthreads();
    if (threadIdx.y == 0) {
        s0 = 0.0;
        s1 = 0.0;
        for (int l = 0; l < kFinalizeY; ++l) {
            s0 += sm[0][l][threadIdx.x];
            s1 += sm[1][l][threadIdx.x];
        }
    }
}

// ---- launch helpers ----

// An upsampled source (BnUpsampled, or none): x null then, the shape (rows, C) its upsampling's, its
// low-resolution tensor aligned and apart from the output.
inline void check_upsampled(const char* op, size_t rows, int c, const bf16* x, const BnUpsampled* up, const void* out,
                     size_t out_bytes) {
    if (!up) return;
    SF_CHECK(x == nullptr, "%s: x must be null when the BN input is formed by upsampling (up given)", op);
    const Shape4& s = up->lo_shape;
    upsample_check_args(op, s, up->factor);  // the factor and the index ranges the upsample kernels accept
    SF_CHECK(s.c == c, "%s: the upsampled source (%d,%d,%d,%d) must have C=%d", op, s.n, s.h, s.w, s.c, c);
    const size_t want = static_cast<size_t>(s.n) * (up->factor * s.h) * (up->factor * s.w);
    SF_CHECK(rows == want, "%s: rows=%zu, but x%d upsampling of (%d,%d,%d,%d) gives %zu", op, rows, up->factor, s.n,
             s.h, s.w, s.c, want);
    SF_CHECK(rt::aligned(up->lo, 16), "%s: the upsampled source must be non-null and 16-byte aligned (%p)", op,
             static_cast<const void*>(up->lo));
    SF_CHECK(!rt::overlap(out, out_bytes, up->lo, s.numel() * sizeof(bf16)),
             "%s: the output must not alias the upsampled source", op);
}

// Checks shared by the launchers; returns the plan. With an upsampled source (up), x is null.
inline BnActPlan check_common(const char* op, const rt::Exec& ex, size_t rows, int c, bool train, int row_batch, const bf16* x,
                       const void* out, const BnUpsampled* up = nullptr, int min_blocks = 1) {
    rt::check_cuda_exec(op, ex);
    const BnActPlan plan = bn_act_plan(rows, c, train, row_batch, min_blocks);
    SF_CHECK((up || rt::aligned(x, 16)) && rt::aligned(out, 16),
             "%s: bf16 tensors must be non-null and 16-byte aligned (x=%p out=%p)", op, static_cast<const void*>(x),
             out);
    SF_CHECK(static_cast<const void*>(x) != out, "%s: the output must not alias x", op);
    check_upsampled(op, rows, c, x, up, out, rows * static_cast<size_t>(c) * sizeof(bf16));
    return plan;
}

inline void check_vec(const char* op, const char* name, const float* p) { rt::check_device_ptr(op, name, p, alignof(float)); }

inline void check_workspace(const char* op, const BnActPlan& plan, const float* ws, size_t ws_floats) {
    check_vec(op, "workspace", ws);
    SF_CHECK(ws_floats >= plan.workspace_floats,
             "%s: workspace of %zu floats is too small for rows=%zu C=%d (need bn_act_workspace_floats = %zu)", op,
             ws_floats, plan.rows, plan.c, plan.workspace_floats);
}

// Calls f(std::integral_constant<int, R>{}) for the plan's rows per loop turn (kBnActRowBatches).
template <class F>
inline void with_row_batch(const BnActPlan& pl, F&& f) {
    switch (pl.row_batch) {
        case 1: return f(std::integral_constant<int, 1>{});
        case 4: return f(std::integral_constant<int, 4>{});
    }
    SF_FAIL("bn_act: row_batch %d has no kernel (valid: 1, 4)", pl.row_batch);
}

// Calls f(src, std::integral_constant<int, R>{}) for the BN input's source: the stored x in the plan's rows per
// loop turn, or (up) the upsampling of up->lo, one row per turn (the batched loops load stored rows only).
template <class F>
inline void with_source(const BnActPlan& pl, const bf16* x, const BnUpsampled* up, F&& f) {
    if (up) {
        const Shape4& s = up->lo_shape;
        return f(RowsUpsampled{dev(up->lo), s.h, s.w, up->factor, s.c}, std::integral_constant<int, 1>{});
    }
    with_row_batch(pl, [&](auto rb) { f(RowsStored{dev(x)}, rb); });
}

}  // namespace

}  // namespace kern
