// CUDA 1x1 conv + bias of the heads, bf16 x -> fp32 logits, forward and backward
// (kernels/head_conv_cuda.h, docs/KERNELS_ELTWISE.md).
//
// Geometry of both kernels: a block is 32 rows x 8 lanes; lane l owns channels [8l, 8l + 8) of its
// row (one 128-bit load of 8 bf16; lanes at or past Cin/8 idle), so a warp reads 4 whole 128-byte
// rows (Cin = 64) and holds that group's weights for all Cout outputs in registers (Cout*8 floats),
// loaded once per thread. Rows of x and dx lie `pitch` elements apart (a multiple of 8, at least Cin: a
// head's 64-channel slice of a wider tensor, NetShape::merge_heads). Cout is a template parameter (1..8),
// so every per-output array is in registers.
// Forward: per row, each lane forms Cout partial dot products over its 8 channels in fp32 (FMA), a
// fixed xor-butterfly over the row's 8 lanes adds them, lane k writes y[r, k] = sum + b[k].
// Backward: one kernel walks each row chunk once: dx[r, group] += sum_k dy[r, k] * w[k, group]
// (elementwise, no sharing), and per thread the running sums dy[r, k] * x[r, j] (dw) and dy[r, k]
// (db) in fp32. The block combines its 32 row lanes with fixed shuffle/shared-memory trees and writes
// the chunk's partials to the workspace; a finalize kernel adds the chunks in a fixed order in fp64
// and accumulates into dw and db. No atomics: bitwise reproducible.
// With a BN prologue (kPro: NetShape::fuse_head_bn) x holds the producer's pre-BN output and each lane
// forms its 8 channels' bf16(act(bn(x))) after the load (kernels/bn_act_device.cuh), in the forward and
// in the backward's dw sums: the values the apply pass would have stored, so the results are those of
// the plain kernel on that pass's output, bit for bit.
// The prologue BN's dx from the logits' gradient (head_bn_dx_kernel, kern::ConvPolicy::head_bn_dx): the backward
// then stores no dx (only the BN's sums of it) and the BN's dx pass forms each dy from the logits' gradient and
// the weights, the same value, so the rows x channels tensor between them is never written nor read.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/act_dispatch.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_device.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/head_conv_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

constexpr int kWarps = kHeadConvThreads / 32;
constexpr int kFinalizeX = 32;  // partial entries per finalize block
constexpr int kFinalizeY = 8;   // chunk lanes per finalize block
static_assert(kHeadConvLanes == 8 && kHeadConvThreads % 32 == 0, "the butterflies assume 8 lanes per row");

// ---- device helpers (load8, load8_rw, store8: kernels/cuda_util.cuh) ----

// This lane's weights: wr[k][j] = w[k, 8*lane + j] (zeros for an idle lane).
template <int K>
__device__ __forceinline__ void load_lane_weights(const float* __restrict__ w, int cin, int lane, bool has,
                                                  float (&wr)[K][8]) {
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
        for (int j = 0; j < 8; ++j) wr[k][j] = has ? __ldg(w + k * cin + 8 * lane + j) : 0.0f;
}

// The prologue's constants of this lane's 8 channels (kPro and a lane with channels), else unused.
template <bool kPro>
__device__ __forceinline__ BnApply8 lane_prologue(const DwPrologue& pro, int lane, bool has) {
    BnApply8 p{};
    if constexpr (kPro)
        if (has) p = load_bn_apply8(lane, pro.gamma, pro.beta, pro.mean, pro.invstd, pro.eval, pro.eps);
    return p;
}

// x's 8 channels of this lane at p, through the prologue when kPro.
template <bool kPro, Act A>
__device__ __forceinline__ void load_x8(const bfloat* p, const BnApply8& bn, float (&v)[8]) {
    load8(p, v);
    if constexpr (kPro) {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = bn_act_value_bf16<A>(bn, j, v[j]);
    }
}

// ---- kernels ----

// y (rows, K) = x (rows, Cin) w^T + b. Grid forward_blocks x 256, grid-stride over 32-row tiles
// (the tile loop is block-uniform, so every lane reaches the shuffles).
template <int K, bool kPro, Act A>
__global__ void head_conv_forward_kernel(size_t rows, int cin, size_t pitch, const bfloat* __restrict__ x,
                                         const float* __restrict__ w, const float* __restrict__ b,
                                         float* __restrict__ y, DwPrologue pro) {
    rt::pdl_entry();
    const int lane = threadIdx.x % kHeadConvLanes, ry = threadIdx.x / kHeadConvLanes;
    const bool has = lane < cin / 8;
    float wr[K][8];
    load_lane_weights<K>(w, cin, lane, has, wr);
    const BnApply8 bn = lane_prologue<kPro>(pro, lane, has);
    const float bias = lane < K ? __ldg(b + lane) : 0.0f;
    for (size_t r0 = static_cast<size_t>(blockIdx.x) * kHeadConvRowsPerBlock; r0 < rows;
         r0 += static_cast<size_t>(gridDim.x) * kHeadConvRowsPerBlock) {
        const size_t r = r0 + ry;
        float acc[K] = {};
        if (has && r < rows) {
            float v[8];
            load_x8<kPro, A>(x + r * pitch + 8 * lane, bn, v);
#pragma unroll
            for (int k = 0; k < K; ++k)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[k] = fmaf(v[j], wr[k][j], acc[k]);
        }
        // Butterfly over the row's 8 lanes (aligned groups of 8 in the warp): every lane ends with
        // the same totals (fp addition is commutative).
#pragma unroll
        for (int k = 0; k < K; ++k)
#pragma unroll
            for (int o = kHeadConvLanes / 2; o > 0; o >>= 1) acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], o);
        if (r < rows && lane < K) {
            float s = acc[0];
#pragma unroll
            for (int k = 1; k < K; ++k) s = lane == k ? acc[k] : s;
            y[r * K + lane] = s + bias;
        }
    }
}

// Backward, pass 1. Grid chunks x 256: block k owns rows [chunk_begin(k), chunk_begin(k+1)).
// dx updated (accumulate false: overwritten, never read; null with kBng: not stored); part[k] = this chunk's (dw (K,
// Cin) row-major, then db (K)). kBng (with kPro): per lane the prologue BN's backward sums of its 8 channels from the
// dx values stored and the raw x (bn_grad_add), combined over the block as dw's are and written to bg.part
// (HeadBnGrad's layout).
template <int K, bool kPro, Act A, bool kBng>
__global__ void head_conv_backward_kernel(size_t rows, int cin, size_t pitch, int chunks, const bfloat* __restrict__ x,
                                          const float* __restrict__ dy, const float* __restrict__ w, bfloat* dx,
                                          float* __restrict__ part, bool accumulate, DwPrologue pro, HeadBnGrad bg) {
    rt::pdl_entry();
    static_assert(kPro || !kBng, "the BN-backward sums are the prologue BN's");
    constexpr int kVals = 9 * K;            // per lane: dw[k][0..8) then db[k]
    constexpr int kBnVals = kBng ? 16 : 1;  // per lane: sum g of its 8 channels, then sum g * xhat
    __shared__ float sm[kWarps][kHeadConvLanes][kVals];
    __shared__ float sb[kWarps][kHeadConvLanes][kBnVals];
    const int lane = threadIdx.x % kHeadConvLanes, ry = threadIdx.x / kHeadConvLanes;
    const bool has = lane < cin / 8;
    float wr[K][8];
    load_lane_weights<K>(w, cin, lane, has, wr);
    const BnApply8 bn = lane_prologue<kPro>(pro, lane, has);
    float acc[K][8] = {}, accb[K] = {};
    float inv[8] = {}, sg[8] = {}, sgx[8] = {};  // kBng: the lane's invstd and running sums
    if constexpr (kBng)
        if (has)
#pragma unroll
            for (int j = 0; j < 8; ++j) inv[j] = __ldg(pro.invstd + 8 * lane + j);
    const size_t end = chunk_begin(rows, chunks, blockIdx.x + 1);
    for (size_t r = chunk_begin(rows, chunks, blockIdx.x) + ry; r < end; r += kHeadConvRowsPerBlock) {
        float g[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            g[k] = __ldg(dy + r * K + k);
            accb[k] += g[k];
        }
        if (!has) continue;
        const size_t off = r * pitch + 8 * lane;
        float v[8], raw[8], d[8] = {};
        load8(x + off, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) raw[j] = v[j];  // the BN's input (kBng)
        if constexpr (kPro) {
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = bn_act_value_bf16<A>(bn, j, v[j]);
        }
        if (accumulate) load8_rw(dx + off, d);  // dx is read and written by this thread only
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                acc[k][j] = fmaf(g[k], v[j], acc[k][j]);
                s = fmaf(g[k], wr[k][j], s);
            }
            d[j] += s;  // head_bn_dx_kernel forms this value again (dx null: never stored)
        }
        if (dx) store8(dx + off, d);
        if constexpr (kBng) {  // the sums of the values just stored (store8 rounds to nearest even)
#pragma unroll
            for (int j = 0; j < 8; ++j)
                bn_grad_add<A>(raw[j], __bfloat162float(__float2bfloat16_rn(d[j])), bn.m[j], inv[j], bn.scale[j],
                               bn.b[j], sg[j], sgx[j]);
        }
    }
    // Row lanes: first the 4 rows of each warp (xor 8, then 16), then the 8 warps in order.
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int o = 8; o <= 16; o <<= 1) {
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[k][j] += __shfl_xor_sync(0xffffffffu, acc[k][j], o);
            accb[k] += __shfl_xor_sync(0xffffffffu, accb[k], o);
        }
    }
    if constexpr (kBng) {
#pragma unroll
        for (int o = 8; o <= 16; o <<= 1)
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                sg[j] += __shfl_xor_sync(0xffffffffu, sg[j], o);
                sgx[j] += __shfl_xor_sync(0xffffffffu, sgx[j], o);
            }
    }
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 < kHeadConvLanes) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
#pragma unroll
            for (int j = 0; j < 8; ++j) sm[warp][lane][8 * k + j] = acc[k][j];
            sm[warp][lane][8 * K + k] = accb[k];
        }
        if constexpr (kBng) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                sb[warp][lane][j] = sg[j];
                sb[warp][lane][8 + j] = sgx[j];
            }
        }
    }
    __syncthreads();
    if constexpr (kBng) {  // channel c of this conv: the 8 warps in order
        for (int e = threadIdx.x; e < 2 * cin; e += blockDim.x) {
            const int which = e / cin, c = e % cin;
            float s = 0.0f;
#pragma unroll
            for (int q = 0; q < kWarps; ++q) s += sb[q][c / 8][8 * which + c % 8];
            bg.part[(static_cast<size_t>(which) * chunks + blockIdx.x) * bg.channels + bg.channel + c] = s;
        }
    }
    const int wn = K * cin, entries = wn + K;
    float* p = part + static_cast<size_t>(blockIdx.x) * entries;
    for (int e = threadIdx.x; e < entries; e += blockDim.x) {
        int ln = 0, idx = 8 * K + (e - wn);  // db[k]: every lane summed the same dy, take lane 0's
        if (e < wn) {
            const int k = e / cin, ch = e % cin;
            ln = ch / 8;
            idx = 8 * k + ch % 8;
        }
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < kWarps; ++q) s += sm[q][ln][idx];
        p[e] = s;
    }
}

// The prologue BN's dx from the logits' gradient (head_bn_dx_cuda). Block (channels / 8, 256 / (channels / 8)):
// thread x owns channels [8x, 8x + 8), all of one head's (the heads tile the channels in multiples of 8); rows
// grid-stride along y. The heads' weights sit in shared memory (w[k, c - channel] of c's head, 0 past its cout;
// laid out so that a warp's reads are free of bank conflicts); per row a thread reads its head's cout logit gradients
// (fp32; the row's threads of one head read the same ones: L1 hits), forms each channel's dy as
// head_conv_backward_kernel forms its dx (the fmaf chain over k in order from 0, added to 0, rounded to bf16), then dx
// as bn_act_backward_dx's pass does (bn_act_dx_value).
struct HeadDxSources {
    HeadDxSource h[kHeadBnDxMaxHeads];
    int n = 0;
};

// The head whose channels hold channel ch (the sources tile the channels in order).
__device__ __forceinline__ int head_of(const HeadDxSources& src, int ch) {
    int h = 0;
    while (h + 1 < src.n && ch >= src.h[h + 1].channel) ++h;
    return h;
}

template <Act A>
__global__ void head_bn_dx_kernel(size_t rows, int c, HeadDxSources src, const bfloat* __restrict__ x,
                                  const float* __restrict__ gamma, const float* __restrict__ beta,
                                  const float* __restrict__ mean, const float* __restrict__ invstd,
                                  const float* __restrict__ coef, bfloat* __restrict__ dx) {
    rt::pdl_entry();
    // wsm[k][j][g] = w[k, 8g + j - channel] of channel 8g + j's head: a warp's threads (consecutive groups g of a
    // row, or the same g of several rows) read consecutive words or one word, never two words of one bank.
    __shared__ float wsm[kHeadConvMaxCout][8][kHeadBnDxMaxChannels / 8];
    const int threads = blockDim.x * blockDim.y;
    for (int e = threadIdx.y * blockDim.x + threadIdx.x; e < kHeadConvMaxCout * c; e += threads) {
        const int k = e / c, j = e % c / (c / 8), gr = e % (c / 8), ch = 8 * gr + j;  // consecutive e: consecutive gr
        const HeadDxSource& s = src.h[head_of(src, ch)];
        wsm[k][j][gr] = k < s.cout ? __ldg(s.w + k * s.cin + (ch - s.channel)) : 0.0f;
    }
    __syncthreads();
    const int g = threadIdx.x;  // blockDim.x == c / 8: every thread owns a group
    const HeadDxSource& s = src.h[head_of(src, 8 * g)];
    const int kc = s.cout;
    const float* __restrict__ dy = s.dy;
    const Chan8 p = load_chan8(g, gamma, beta, mean, invstd);
    float mg[8], mgx[8];
    load_bn_coef8(g, c, coef, mg, mgx);
    for (size_t r = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
         r += static_cast<size_t>(gridDim.y) * blockDim.y) {
        float gk[kHeadConvMaxCout];
#pragma unroll
        for (int k = 0; k < kHeadConvMaxCout; ++k) gk[k] = k < kc ? __ldg(dy + r * kc + k) : 0.0f;
        float v[8];
        load8(x + r * c + 8 * g, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            float sum = 0.0f;
#pragma unroll
            for (int k = 0; k < kHeadConvMaxCout; ++k)
                if (k < kc) sum = fmaf(gk[k], wsm[k][j][g], sum);
            float d = 0.0f;
            d += sum;  // as the conv2 backward's d[j] += s on its zeroed d (-0 becomes +0 alike)
            d = __bfloat162float(__float2bfloat16_rn(d));
            v[j] = bn_act_dx_value<A>(p, j, v[j], d, mg[j], mgx[j]);
        }
        store8(dx + r * c + 8 * g, v);
    }
}

// Backward, pass 2. Grid finalize_blocks, block (32, 8): entry e = blockIdx.x*32 + x; lane y adds
// chunks y, y + 8, ... in fp64, lane 0 adds the 8 lane sums in order; dw or db += the total.
// Entry e of the finalize: dw[e] for e < wn, then db[e - wn].
struct AddToDwDb {
    int wn;
    float *dw, *db;
    __device__ __forceinline__ void operator()(int e, float v) const {
        if (e < wn)
            dw[e] += v;
        else
            db[e - wn] += v;
    }
};

__global__ void head_conv_finalize_kernel(int wn, int entries, int chunks, const float* __restrict__ part,
                                          float* __restrict__ dw, float* __restrict__ db) {
    rt::pdl_entry();
    finalize_partials<kFinalizeX, kFinalizeY>(entries, chunks, part, AddToDwDb{wn, dw, db});
}

// ---- launch helpers ----

void check_bf16(const char* op, const char* name, const bf16* p) { rt::check_device_ptr(op, name, p, 16); }
void check_f32(const char* op, const char* name, const float* p) { rt::check_device_ptr(op, name, p, alignof(float)); }

// Calls f(std::integral_constant<bool, kPro>, std::integral_constant<Act, A>) for the prologue (none: kPro
// false, A None).
template <class F>
void with_prologue(const DwPrologue* pro, F&& f) {
    if (!pro) return f(std::false_type{}, std::integral_constant<Act, Act::None>{});
    with_act(pro->act, [&](auto a) { f(std::true_type{}, a); });
}

// Calls f(std::integral_constant<int, K>) for K = cout in [1, kHeadConvMaxCout] (checked by the plan).
template <class F>
void with_cout(int cout, F&& f) {
    switch (cout) {
        case 1: return f(std::integral_constant<int, 1>{});
        case 2: return f(std::integral_constant<int, 2>{});
        case 3: return f(std::integral_constant<int, 3>{});
        case 4: return f(std::integral_constant<int, 4>{});
        case 5: return f(std::integral_constant<int, 5>{});
        case 6: return f(std::integral_constant<int, 6>{});
        case 7: return f(std::integral_constant<int, 7>{});
        default: return f(std::integral_constant<int, 8>{});
    }
}

void launch_forward(const rt::Exec& ex, const HeadConvPlan& pl, const bf16* x, const float* w, const float* b, float* y,
                    const DwPrologue* pro) {
    const DwPrologue p = pro ? *pro : DwPrologue{};
    with_cout(pl.cout, [&](auto k) {
        with_prologue(pro, [&](auto kpro, auto act) {
            rt::launch(ex, "head_conv_forward_kernel",
                       head_conv_forward_kernel<decltype(k)::value, decltype(kpro)::value, decltype(act)::value>,
                       pl.forward_blocks, kHeadConvThreads, 0, pl.rows, pl.cin, static_cast<size_t>(pl.pitch), dev(x),
                       w, b, y, p);
        });
    });
}

void launch_backward(const rt::Exec& ex, const HeadConvPlan& pl, const bf16* x, const float* dy, const float* w,
                     bf16* dx, float* dw, float* db, float* ws, bool accumulate, const DwPrologue* pro,
                     const HeadBnGrad* bng) {
    const DwPrologue p = pro ? *pro : DwPrologue{};
    const HeadBnGrad g = bng ? *bng : HeadBnGrad{};
    with_cout(pl.cout, [&](auto k) {
        with_prologue(pro, [&](auto kpro, auto act) {
            const auto go = [&](auto kbng) {
                rt::launch(ex, "head_conv_backward_kernel",
                           head_conv_backward_kernel<decltype(k)::value, decltype(kpro)::value, decltype(act)::value,
                                                     decltype(kbng)::value>,
                           pl.chunks, kHeadConvThreads, 0, pl.rows, pl.cin, static_cast<size_t>(pl.pitch), pl.chunks,
                           dev(x), dy, w, dev(dx), ws, accumulate, p, g);
            };
            if constexpr (decltype(kpro)::value) {
                if (bng) return go(std::true_type{});
            }
            go(std::false_type{});
        });
    });
    const int wn = pl.cout * pl.cin;
    rt::launch(ex, "head_conv_finalize_kernel", head_conv_finalize_kernel, pl.finalize_blocks,
               dim3(kFinalizeX, kFinalizeY), 0, wn, wn + pl.cout, pl.chunks, ws, dw, db);
}

}  // namespace

// ---- launchers ----

HeadConvPlan head_conv_plan(size_t rows, int cin, int cout, int pitch) {
    SF_CHECK(cin >= 8 && cin <= kHeadConvMaxCin && cin % 8 == 0,
             "head_conv: cin must be a multiple of 8 in [8, %d] (one 8-channel group per lane), got cin=%d",
             kHeadConvMaxCin, cin);
    SF_CHECK(cout >= 1 && cout <= kHeadConvMaxCout, "head_conv: cout must lie in [1, %d], got cout=%d",
             kHeadConvMaxCout, cout);
    if (pitch == 0) pitch = cin;
    SF_CHECK(pitch >= cin && pitch % 8 == 0,
             "head_conv: the row pitch of x and dx must be a multiple of 8 (16-byte rows) and at least cin=%d, got "
             "pitch=%d",
             cin, pitch);
    HeadConvPlan p;
    p.rows = rows;
    p.cin = cin;
    p.cout = cout;
    p.pitch = pitch;
    p.groups = cin / 8;
    if (rows == 0) return p;
    const size_t tiles = (rows + kHeadConvRowsPerBlock - 1) / kHeadConvRowsPerBlock;
    p.forward_blocks = static_cast<int>(std::min(tiles, kHeadConvMaxBlocks));
    p.chunks = static_cast<int>(std::min(tiles, static_cast<size_t>(kHeadConvChunks)));
    const int entries = cout * cin + cout;
    p.finalize_blocks = (entries + kFinalizeX - 1) / kFinalizeX;
    p.workspace_floats = static_cast<size_t>(p.chunks) * entries;
    return p;
}

size_t head_conv_workspace_floats(size_t rows, int cin, int cout) {
    return head_conv_plan(rows, cin, cout, 0).workspace_floats;
}

int head_conv_chunks(size_t rows) { return head_conv_plan(rows, 8, 1, 0).chunks; }

size_t head_conv_bn_grad_floats(size_t rows, int channels) {
    SF_CHECK(channels > 0, "head_conv_bn_grad_floats: channels must be positive, got %d", channels);
    return 2 * static_cast<size_t>(head_conv_chunks(rows)) * static_cast<size_t>(channels);
}

void head_conv_forward_cuda(const rt::Exec& ex, size_t rows, int cin, int cout, const bf16* x, const float* w,
                            const float* b, float* y, int pitch, const DwPrologue* pro) {
    const char* op = "head_conv_forward_cuda";
    rt::check_cuda_exec(op, ex);
    const HeadConvPlan pl = head_conv_plan(rows, cin, cout, pitch);
    if (rows == 0) return;
    check_bf16(op, "x", x);
    check_f32(op, "w", w);
    check_f32(op, "b", b);
    check_f32(op, "y", y);
    check_dw_prologue(op, pro, cin, {{y, rows * cout * sizeof(float)}});
    launch_forward(ex, pl, x, w, b, y, pro);
}

void head_conv_backward_cuda(const rt::Exec& ex, size_t rows, int cin, int cout, const bf16* x, const float* dy,
                             const float* w, bf16* dx, float* dw, float* db, float* ws, size_t ws_floats,
                             bool accumulate, int pitch, const DwPrologue* pro, const HeadBnGrad* bng) {
    const char* op = "head_conv_backward_cuda";
    rt::check_cuda_exec(op, ex);
    const HeadConvPlan pl = head_conv_plan(rows, cin, cout, pitch);
    if (rows == 0) return;
    check_bf16(op, "x", x);
    if (dx) {
        check_bf16(op, "dx", dx);
        SF_CHECK(static_cast<const void*>(x) != static_cast<const void*>(dx), "%s: dx must not alias x", op);
    } else {
        SF_CHECK(bng && !accumulate,
                 "%s: dx may be null only with the BN-backward sums and accumulate false (the sums of the values it "
                 "would hold, for head_bn_dx_cuda)",
                 op);
    }
    check_f32(op, "dy", dy);
    check_f32(op, "w", w);
    check_f32(op, "dw", dw);
    check_f32(op, "db", db);
    check_f32(op, "workspace", ws);
    SF_CHECK(ws_floats >= pl.workspace_floats,
             "%s: workspace of %zu floats is too small for rows=%zu cin=%d cout=%d (need head_conv_workspace_floats "
             "= %zu)",
             op, ws_floats, rows, cin, cout, pl.workspace_floats);
    // dx's rows: the last one ends cin elements past its start.
    const size_t x_bytes = ((rows - 1) * static_cast<size_t>(pl.pitch) + cin) * sizeof(bf16);
    const size_t dx_bytes = dx ? x_bytes : 0;
    const size_t dw_bytes = static_cast<size_t>(cout) * cin * sizeof(float), db_bytes = cout * sizeof(float);
    const size_t ws_bytes = pl.workspace_floats * sizeof(float);
    size_t part_bytes = 0;
    if (bng) {
        SF_CHECK(pro && !pro->eval,
                 "%s: the BN-backward sums are the prologue BN's, in train mode (a prologue with batch statistics)",
                 op);
        SF_CHECK(bng->channels > 0 && bng->channel >= 0 && bng->channel + cin <= bng->channels,
                 "%s: the BN-backward sums' channels [%d, %d) must lie within the BN's %d channels", op, bng->channel,
                 bng->channel + cin, bng->channels);
        check_f32(op, "bng->part", bng->part);
        part_bytes = head_conv_bn_grad_floats(rows, bng->channels) * sizeof(float);
        const size_t dy_bytes = rows * cout * sizeof(float);
        SF_CHECK(
            !rt::overlap(bng->part, part_bytes, x, x_bytes) && !rt::overlap(bng->part, part_bytes, dy, dy_bytes) &&
                !rt::overlap(bng->part, part_bytes, w, dw_bytes) && !rt::overlap(bng->part, part_bytes, dx, dx_bytes) &&
                !rt::overlap(bng->part, part_bytes, dw, dw_bytes) &&
                !rt::overlap(bng->part, part_bytes, db, db_bytes) && !rt::overlap(bng->part, part_bytes, ws, ws_bytes),
            "%s: the BN-backward partials must not alias x, dy, w, dx, dw, db or the workspace", op);
    }
    check_dw_prologue(
        op, pro, cin,
        {{dx, dx_bytes}, {dw, dw_bytes}, {db, db_bytes}, {ws, ws_bytes}, {bng ? bng->part : nullptr, part_bytes}});
    launch_backward(ex, pl, x, dy, w, dx, dw, db, ws, accumulate, pro, bng);
}

void head_bn_dx_cuda(const rt::Exec& ex, Act act, size_t rows, int channels, const HeadDxSource* heads, int nheads,
                     const bf16* x, const float* gamma, const float* beta, const float* mean, const float* invstd,
                     const float* coef, bf16* dx) {
    const char* op = "head_bn_dx_cuda";
    rt::check_cuda_exec(op, ex);
    SF_CHECK(channels >= 8 && channels <= kHeadBnDxMaxChannels && channels % 8 == 0,
             "%s: channels must be a multiple of 8 in [8, %d], got channels=%d", op, kHeadBnDxMaxChannels, channels);
    SF_CHECK(rows >= 2, "%s: rows must be at least 2 (a BN's batch statistics), got rows=%zu", op, rows);
    SF_CHECK(act == Act::None || act == Act::Silu || act == Act::Relu, "%s: unknown activation %d", op,
             static_cast<int>(act));
    SF_CHECK(heads && nheads >= 1 && nheads <= kHeadBnDxMaxHeads, "%s: nheads must lie in [1, %d], got nheads=%d", op,
             kHeadBnDxMaxHeads, heads ? nheads : 0);
    check_bf16(op, "x", x);
    check_bf16(op, "dx", dx);
    const size_t bytes = rows * static_cast<size_t>(channels) * sizeof(bf16);
    SF_CHECK(!rt::overlap(x, bytes, dx, bytes), "%s: dx must not overlap x", op);
    HeadDxSources src;
    src.n = nheads;
    int next = 0;
    for (int h = 0; h < nheads; ++h) {
        const HeadDxSource& s = heads[h];
        SF_CHECK(s.channel == next && s.cin >= 8 && s.cin <= kHeadConvMaxCin && s.cin % 8 == 0 &&
                     s.channel + s.cin <= channels,
                 "%s: head %d's channels [%d, %d) must follow the previous head's (from %d), a multiple of 8 of at "
                 "most %d within the BN's %d",
                 op, h, s.channel, s.channel + s.cin, next, kHeadConvMaxCin, channels);
        SF_CHECK(s.cout >= 1 && s.cout <= kHeadConvMaxCout, "%s: head %d's cout must lie in [1, %d], got cout=%d", op,
                 h, kHeadConvMaxCout, s.cout);
        check_f32(op, "heads[].dy", s.dy);
        check_f32(op, "heads[].w", s.w);
        SF_CHECK(!rt::overlap(s.dy, rows * s.cout * sizeof(float), dx, bytes) &&
                     !rt::overlap(s.w, static_cast<size_t>(s.cout) * s.cin * sizeof(float), dx, bytes),
                 "%s: head %d's logits' gradient and weights must not overlap dx", op, h);
        src.h[h] = s;
        next = s.channel + s.cin;
    }
    SF_CHECK(next == channels, "%s: the heads' channels end at %d, the BN has %d: they must tile them", op, next,
             channels);
    const size_t vec = channels * sizeof(float);
    const std::pair<const float*, const char*> vecs[] = {
        {gamma, "gamma"}, {beta, "beta"}, {mean, "mean"}, {invstd, "invstd"}, {coef, "coef"}};
    for (const auto& v : vecs) {
        check_f32(op, v.second, v.first);
        SF_CHECK(!rt::overlap(v.first, v.first == coef ? 2 * vec : vec, dx, bytes), "%s: %s must not overlap dx", op,
                 v.second);
    }
    const int bx = channels / 8, by = kHeadConvThreads / bx;
    const size_t tiles = (rows + by - 1) / by;
    const int gy = static_cast<int>(std::min(tiles, static_cast<size_t>(kBnActMaxApplyY)));
    with_act(act, [&](auto a) {
        rt::launch(ex, "head_bn_dx_kernel", head_bn_dx_kernel<decltype(a)::value>, dim3(1, gy), dim3(bx, by), 0, rows,
                   channels, src, dev(x), gamma, beta, mean, invstd, coef, dev(dx));
    });
}

}  // namespace kern
