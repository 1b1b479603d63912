// The fused stride-1 backward of the depthwise 3x3 convolution (kernels/dwconv_cuda.h, DwFusedPlan):
// dx and the filter gradient in one pass over dy, launched through dw_launch_backward_fused
// (kernels/dwconv_device.cuh) by the checked launcher of kernels/dwconv.cu.
//
// Pass 1: a block stages one spatial block of dy and of x (with their 1-pixel halos) at a time in
// shared memory, the staged dgrad's way (stage_source), and each thread multiplies, per thread tile,
// the tile's dy pixels into its x window for the filter sums, then runs the staged dgrad's loop (so dx
// has the bits of every dgrad variant). After the block's chunk of
// spatial blocks, the lanes of each channel group are added with a fixed tree and the chunk's
// partials written. Pass 2 adds the chunks per (c, tap) in fp64, in a fixed order, into dw. With a
// BnGradSums (the fused LiteBlock: the prologue's BN), pass 1 also sums that BN's backward reductions over
// the dx it stores and writes them per chunk after the filter partials, and bn_act_backward_finalize adds
// them (a third launch).
// No atomics: two runs are bitwise equal. Design and bytes: docs/KERNELS_DWCONV.md, "The fused
// backward".
#include <cstdint>

#include "kernels/act_dispatch.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/dwconv_device.cuh"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"

namespace kern {

namespace {

constexpr int kV = kDwFusedVec, kTH = kDwFusedTileH, kTW = kDwFusedTileW;

// Spatial block sp of the fused plan: image n, first dx row d0 and column e0 (block column fastest).
struct FusedSpatial {
    int n, d0, e0;
};

__device__ __forceinline__ FusedSpatial fused_spatial(long long sp, const DwTileGrid& g) {
    FusedSpatial f;
    const long long bw = sp % g.blocks_w, rest = sp / g.blocks_w;
    f.e0 = static_cast<int>(bw) * g.block_w;
    f.d0 = static_cast<int>(rest % g.blocks_h) * g.block_h;
    f.n = static_cast<int>(rest / g.blocks_h);
    return f;
}

// One thread tile: dx rows [h0, h0 + kTH), columns [w0, w0 + kTW) of channel group gi. sdy0 and sx0
// point at the tile's first staged dy and x pixel (its top-left halo pixel) and channel group.
// wgrad first: tile pixel (a, b)'s dy is window pixel (a + 1, b + 1), and x window pixel (i, j) pairs
// with it through tap (i - a, j - b) (the forward's pairing); acc[k*9 + tap] (channel V*gi + k, dw's
// layout). dy outside the image was staged as +0, so tile pixels past the edge add +0 products.
// Then dgrad: the staged dgrad kernel's loop at stride 1 (dy window pixel (i, j) feeds tile pixel
// (i + r - 2, j + s - 2) through tap (r, s)), so every dx pixel adds the same fmafs in the same order
// as every dgrad variant. In this order the tile's dy (wgrad) and its dx sums (dgrad) are never live
// together: 167 registers without spills (sm_90, nvcc 13.0), where the other order spilled.
// kG: the BN-backward epilogue (BnGradSums) of the BN whose input xn is (at the dx positions): each stored
// dx value, as rounded to bf16, and the BN input at its position add g and g * xhat into bsum[k] and
// bsum[kV + k] (bn_grad_add with activation G; the channel's constants from shared memory, ep[0..3][k]:
// mean, invstd, gamma * invstd, beta of this thread's channels).
template <bool kG, Act G>
__device__ __forceinline__ void fused_tile(const bfloat* sdy0, const bfloat* sx0, int src_w, int pitch,
                                           const float (&wt)[9][kV], bfloat* __restrict__ dxn, int h0, int w0,
                                           int h, int w, int c, bool accumulate, float (&acc)[9 * kV],
                                           const bfloat* __restrict__ xn, const float* ep, float (&bsum)[2 * kV]) {
    constexpr int NR = kTH + 2, NC = kTW + 2;
    {
        float d[kTH][kTW][kV];
#pragma unroll
        for (int a = 0; a < kTH; ++a)
#pragma unroll
            for (int b = 0; b < kTW; ++b) loadv_rw<kV>(sdy0 + ((a + 1) * src_w + (b + 1)) * pitch, d[a][b]);
#pragma unroll
        for (int i = 0; i < NR; ++i) {
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                float v[kV];
                loadv_rw<kV>(sx0 + (i * src_w + j) * pitch, v);
#pragma unroll
                for (int a = 0; a < kTH; ++a) {
                    const int r = i - a;
                    if (r < 0 || r > 2) continue;
#pragma unroll
                    for (int b = 0; b < kTW; ++b) {
                        const int s = j - b;
                        if (s < 0 || s > 2) continue;
#pragma unroll
                        for (int k = 0; k < kV; ++k)
                            acc[k * 9 + r * 3 + s] = fmaf(d[a][b][k], v[k], acc[k * 9 + r * 3 + s]);
                    }
                }
            }
        }
    }
    float o[kTH][kTW][kV] = {};
#pragma unroll
    for (int i = 0; i < NR; ++i) {
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            float v[kV];
            loadv_rw<kV>(sdy0 + (i * src_w + j) * pitch, v);
#pragma unroll
            for (int r = 0; r < 3; ++r) {
                const int a = i + r - 2;
                if (a < 0 || a >= kTH) continue;
#pragma unroll
                for (int s = 0; s < 3; ++s) {
                    const int b = j + s - 2;
                    if (b < 0 || b >= kTW) continue;
                    fmav<kV>(o[a][b], v, wt[r * 3 + s]);
                }
            }
        }
    }
#pragma unroll
    for (int a = 0; a < kTH; ++a) {
        if (h0 + a >= h) break;
#pragma unroll
        for (int b = 0; b < kTW; ++b) {
            if (w0 + b >= w) break;
            bfloat* p = dxn + (static_cast<size_t>(h0 + a) * w + (w0 + b)) * c;
            float old[kV] = {};
            if (accumulate) loadv_rw<kV>(p, old);  // dx is read and written by this thread only
#pragma unroll
            for (int k = 0; k < kV; ++k) old[k] += o[a][b][k];
            storev<kV>(p, old);
        }
    }
    if constexpr (kG) {  // the tile's stored dx read back (this thread's own stores), with the BN input
#pragma unroll
        for (int a = 0; a < kTH; ++a) {
            if (h0 + a >= h) break;
#pragma unroll
            for (int b = 0; b < kTW; ++b) {
                if (w0 + b >= w) break;
                const size_t at = (static_cast<size_t>(h0 + a) * w + (w0 + b)) * c;
                float d[kV], xv[kV];
                loadv_rw<kV>(dxn + at, d);
                loadv_rw<kV>(xn + at, xv);
#pragma unroll
                for (int k = 0; k < kV; ++k)
                    bn_grad_add<G>(xv[k], d[k], ep[k], ep[kV + k], ep[2 * kV + k], ep[3 * kV + k], bsum[k],
                                   bsum[kV + k]);
            }
        }
    }
}

// Pass 1. 1-D grid fp.grid x kDwThreads: block b owns channel block b % cblocks and chunk b / cblocks
// (spatial blocks [spatial*k/chunks, spatial*(k+1)/chunks)). Thread t's channel group is t % groups for
// every tile it takes (groups divides kDwThreads), so its 9V filter sums run over the whole chunk; lane
// t / groups. Then a fixed tree over the lanes (lanes [0, s) add lanes [s, 2s), s halving) in shared
// memory, and lane 0 writes part[k][c*9 + tap] for its 9V entries.
// kBnb: dy is the gradient of the BatchNorm + activation A that follows this conv, whose input is
// xbn; the conv output's gradient is formed while staging (stage_source's BN backward prologue, with
// bnb's statistics and coefficients), the values bn_act_backward's dx pass would have stored.
// kPro: x is the producer's pre-BN output, and the conv input the forward read, bf16(P(bn(x))) with
// pro's statistics, is formed while staging (stage_source's kPro2): the values the producer's apply pass
// would have stored, so dx and dw are those of the kernel on them. With kBnb as well, both prologues (the
// fused LiteBlock's depthwise ConvBN with its BN's dx inside).
// kG (with kPro): the prologue's BN's backward reductions from the dx stored (BnGradSums, whose BN is the
// prologue's: its input x, activation P): per thread over its tiles in order, then the lane tree with the
// filter sums, and lane 0 writes gpart[k][c] (sum g) and gpart[chunks + k][c] (sum g * xhat) for chunk k;
// bn_act_backward_finalize adds the chunks.
template <Act A, bool kBnb, bool kPro, Act P, bool kG>
__global__ void __launch_bounds__(kDwThreads, 3)
    dwconv3x3_backward_fused_kernel(DwFusedPlan fp, const bfloat* __restrict__ x, const bfloat* __restrict__ dy,
                                    const bfloat* __restrict__ w, bfloat* __restrict__ dx, float* __restrict__ part,
                                    bool accumulate, const bfloat* __restrict__ xbn, DwBnBackward bnb,
                                    DwPrologue pro, float* __restrict__ gpart) {
    rt::pdl_entry();
    static_assert(!kG || kPro, "the BN-backward epilogue reduces the prologue's BN");
    constexpr int kSums = 9 * kV + (kG ? 2 * kV : 0);  // per thread: filter sums, then sum g, sum g * xhat
    __shared__ __align__(16) bfloat sdy[kDwFusedStageElems];
    __shared__ __align__(16) bfloat sx[kDwFusedStageElems];
    // kG: the prologue BN's constants of this block's channels, [group][mean | invstd | scale | beta][k]
    // (load_chan8's arithmetic: scale = gamma * invstd).
    __shared__ float sep[kG ? 4 * 64 : 1];
    const DwTileGrid& g = fp.stage;
    const int cbi = static_cast<int>(blockIdx.x % static_cast<unsigned>(g.cblocks));
    const int chunk = static_cast<int>(blockIdx.x / static_cast<unsigned>(g.cblocks));
    const int c0 = cbi * g.cb;
    const long long lo = fp.spatial * chunk / fp.chunks, hi = fp.spatial * (chunk + 1) / fp.chunks;
    const int t = static_cast<int>(threadIdx.x);
    const int gi = t % fp.groups, tc = g.block_w / kTW, items = fp.groups * (g.block_h / kTH) * tc;
    float acc[9 * kV] = {};
    float bsum[2 * kV] = {};
    if constexpr (kG) {
        if (t < g.cb) {  // the first barrier of the loop orders these stores before every read
            const int ch = c0 + t, at = (t / kV) * 4 * kV + t % kV;
            const float inv = __ldg(pro.invstd + ch);
            sep[at] = __ldg(pro.mean + ch);
            sep[at + kV] = inv;
            sep[at + 2 * kV] = __ldg(pro.gamma + ch) * inv;
            sep[at + 3 * kV] = __ldg(pro.beta + ch);
        }
    }
    const size_t image = static_cast<size_t>(fp.h) * fp.w * fp.c;
    for (long long sp = lo; sp < hi; ++sp) {
        const FusedSpatial f = fused_spatial(sp, g);
        const size_t base = static_cast<size_t>(f.n) * image + c0;
        if constexpr (kBnb && kPro)
            stage_source<A, false, true, true, true, P>(dy + base, fp.h, fp.w, fp.c, f.d0 - 1, f.e0 - 1, g, sdy, pro,
                                                        c0, x + base, sx, xbn + base, bnb);
        else if constexpr (kBnb)
            stage_source<A, false, true, true>(dy + base, fp.h, fp.w, fp.c, f.d0 - 1, f.e0 - 1, g, sdy, DwPrologue{}, c0,
                                               x + base, sx, xbn + base, bnb);
        else if constexpr (kPro)
            stage_source<Act::None, false, true, false, true, P>(dy + base, fp.h, fp.w, fp.c, f.d0 - 1, f.e0 - 1, g,
                                                                 sdy, pro, c0, x + base, sx);
        else
            stage_source<Act::None, false, true>(dy + base, fp.h, fp.w, fp.c, f.d0 - 1, f.e0 - 1, g, sdy, DwPrologue{},
                                                 0, x + base, sx);
        __syncthreads();
        // The group's weights, loaded again per spatial block (L1 hits): not live while staging, where
        // the BN prologue's channel constants need the registers.
        float wt[9][kV];
        load_weights<kV>(w, c0 / kV + gi, wt);
        for (int item = t; item < items; item += kDwThreads) {
            const int rest = item / fp.groups, ta = (rest / tc) * kTH, tb = (rest % tc) * kTW;
            const int h0 = f.d0 + ta, w0 = f.e0 + tb;
            if (h0 >= fp.h || w0 >= fp.w) continue;
            const int off = (ta * g.src_w + tb) * g.pitch + kV * gi;
            const size_t img = static_cast<size_t>(f.n) * image + c0 + kV * gi;
            fused_tile<kG, P>(sdy + off, sx + off, g.src_w, g.pitch, wt, dx + img, h0, w0, fp.h, fp.w, fp.c,
                              accumulate, acc, x + img, sep + (kG ? gi * 4 * kV : 0), bsum);
        }
        __syncthreads();  // the next spatial block overwrites the staged pixels
    }
    // The lane tree, in the staged dy's shared memory (free now: the loop ended on a barrier).
    // red[k][t]: consecutive threads, consecutive words.
    float* red = reinterpret_cast<float*>(sdy);
#pragma unroll
    for (int k = 0; k < 9 * kV; ++k) red[k * kDwThreads + t] = acc[k];
    if constexpr (kG) {
#pragma unroll
        for (int k = 0; k < 2 * kV; ++k) red[(9 * kV + k) * kDwThreads + t] = bsum[k];
    }
    __syncthreads();
    const int lane = t / fp.groups;
    for (int s = fp.lanes / 2; s > 0; s >>= 1) {
        if (lane < s) {
#pragma unroll
            for (int k = 0; k < kSums; ++k) red[k * kDwThreads + t] += red[k * kDwThreads + t + s * fp.groups];
        }
        __syncthreads();
    }
    if (lane == 0) {
        float* dst = part + static_cast<size_t>(chunk) * fp.c * 9 + static_cast<size_t>(c0 + kV * gi) * 9;
#pragma unroll
        for (int k = 0; k < 9 * kV; ++k) dst[k] = red[k * kDwThreads + t];
        if constexpr (kG) {
            const size_t ch = static_cast<size_t>(c0 + kV * gi);
            float* sg = gpart + static_cast<size_t>(chunk) * fp.c + ch;
            float* sgx = gpart + static_cast<size_t>(fp.chunks + chunk) * fp.c + ch;
#pragma unroll
            for (int k = 0; k < kV; ++k) {
                sg[k] = red[(9 * kV + k) * kDwThreads + t];
                sgx[k] = red[(10 * kV + k) * kDwThreads + t];
            }
        }
    }
}

// Pass 2: the wgrad's finalize (fixed-order fp64 sum of the chunk partials per (c, tap), dw +=).
__global__ void dwconv3x3_fused_finalize_kernel(int entries, int chunks, const float* __restrict__ part,
                                                float* __restrict__ dw) {
    rt::pdl_entry();
    finalize_partials<kDwFinalizeX, kDwFinalizeY>(entries, chunks, part, AddTo{dw});
}

template <Act A, bool kBnb, bool kPro, Act P, bool kG = false>
void launch_fused(const rt::Exec& ex, const DwFusedPlan& fp, const bf16* x, const bf16* dy, const bf16* w, bf16* dx,
                  float* part, bool accumulate, const DwBnBackward& bnb, const DwPrologue& pro) {
    rt::launch(ex, "dwconv3x3_backward_fused_kernel", dwconv3x3_backward_fused_kernel<A, kBnb, kPro, P, kG>,
               static_cast<unsigned>(fp.grid), kDwThreads, 0, fp, dev(x), dev(dy), dev(w), dev(dx), part, accumulate,
               dev(bnb.x), bnb, pro, kG ? part + fp.workspace_floats : nullptr);
}

}  // namespace

void dw_launch_backward_fused(const rt::Exec& ex, const DwFusedPlan& fp, const bf16* x, const bf16* dy, const bf16* w,
                              bf16* dx, float* dw, float* part, bool accumulate, const DwBnBackward* bnb,
                              const DwPrologue* pro, const BnGradSums* bng) {
    // The activation template arguments from the runtime ones: A of the BN backward (kBnb), P of the
    // forward's prologue (kPro); an absent prologue's is Act::None.
    const DwBnBackward b = bnb ? *bnb : DwBnBackward{};
    const DwPrologue p = pro ? *pro : DwPrologue{};
    with_act(bnb ? bnb->act : Act::None, [&](auto a) {
        with_act(pro ? pro->act : Act::None, [&](auto q) {
            constexpr Act kA = decltype(a)::value, kP = decltype(q)::value;
            if (bng && bnb)  // the launcher checked: bng goes with pro
                launch_fused<kA, true, true, kP, true>(ex, fp, x, dy, w, dx, part, accumulate, b, p);
            else if (bng)
                launch_fused<Act::None, false, true, kP, true>(ex, fp, x, dy, w, dx, part, accumulate, b, p);
            else if (bnb && pro)
                launch_fused<kA, true, true, kP>(ex, fp, x, dy, w, dx, part, accumulate, b, p);
            else if (bnb)
                launch_fused<kA, true, false, Act::None>(ex, fp, x, dy, w, dx, part, accumulate, b, p);
            else if (pro)
                launch_fused<Act::None, false, true, kP>(ex, fp, x, dy, w, dx, part, accumulate, b, p);
            else
                launch_fused<Act::None, false, false, Act::None>(ex, fp, x, dy, w, dx, part, accumulate, b, p);
        });
    });
    rt::launch(ex, "dwconv3x3_fused_finalize_kernel", dwconv3x3_fused_finalize_kernel, fp.finalize_blocks,
               dim3(kDwFinalizeX, kDwFinalizeY), 0, fp.c * 9, fp.chunks, part, dw);
    if (bng)
        bn_act_backward_finalize(ex, static_cast<size_t>(fp.n) * fp.h * fp.w, fp.c, fp.chunks,
                                 part + fp.workspace_floats, bng->dgamma, bng->dbeta, bng->coef);
}

}  // namespace kern
