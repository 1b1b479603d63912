// Custom CUDA depthwise 3x3 convolution (kernels/dwconv.cu: the checked launchers; the kernels in
// dwconv_gather.cu and dwconv_wgrad.cu): NHWC bf16 activations, pad 1, stride 1 or 2, no bias, fp32
// accumulation; forward, backward-data and backward-filter. They compete with
// cuDNN's grouped convolution: the network times both at plan time and keeps the faster.
// Declared without CUDA types so g++ code (layers, planner, tests) can call them; device buffers of
// kern::bf16 are passed to the kernels as __nv_bfloat16. Design and bytes moved: docs/KERNELS_DWCONV.md.
//
//   x (N, H, W, C) bf16;  w (C, 3, 3, 1) bf16 KRSC, w[c*9 + r*3 + s] (the bf16 working copy);
//   y, dy (N, P, Q, C) bf16 with P = (H - 1)/stride + 1, Q = (W - 1)/stride + 1;  dw (C*9) fp32.
//   forward:  y  = dwconv(x, w)                      overwritten
//   dgrad:    dx += dwconv^T(dy, w)                  read, added in fp32, rounded to bf16 once
//   wgrad:    dw += sum over N, P, Q of dy * x-patch  deterministic two-pass reduction, no atomics
//   prologue (forward and wgrad, optional): x is the pre-BatchNorm output of the producing layer,
//             and the kernel reads bf16(act(bn(x))) in its place, the value bn_act_forward_* would
//             have stored, bit for bit; the padding stays zero. The producer's activation is then
//             never written to memory (the fused LiteBlock, docs/KERNELS_DWCONV.md).
//
// Every kernel gives each thread one group of channels (8 by default: one 128-bit load of 8 bf16 per
// pixel; the gather passes have variants with 4 and 2, kDwVariants) and a small tile of destination
// pixels, so each loaded pixel feeds every tap that reaches into the tile.
// The grid arithmetic is here (constexpr) so CPU tests check exactly what the launchers use.
// Requirements checked by the launchers (rt::Error, before any launch): CUDA Exec; a supported shape;
// bf16 pointers non-null and 16-byte aligned; dw 4-byte and workspace 16-byte aligned; outputs not
// aliasing inputs; a large enough workspace. Launchers enqueue on ex.stream, never allocate and never
// synchronise (CUDA-graph capturable).
#pragma once
#include <algorithm>
#include <cstddef>
#include <initializer_list>

#include "kernels/bf16.h"
#include "kernels/bn_fusion.h"
#include "kernels/conv.h"
#include "runtime/exec.h"

namespace kern {

// ---- geometry constants (shared by the plan, the kernels and the tests) ----
constexpr int kDwThreads = 128;  // threads per block of the forward and dgrad kernels (1-D blocks)
// Destination tile per thread of the default gather variant (forward and dgrad): 2 rows x 4 columns.
// Both even: the stride-2 dgrad tile then starts on an even row and column, where every tile has the
// same tap pattern.
constexpr int kDwTileH = 2, kDwTileW = 4;

// Gather-pass variants (forward, dgrad): channels per thread (8, 4 or 2 bf16: one 128-, 64- or 32-bit
// load per pixel), the destination tile per thread, and where the source pixels come from. Index 0 is
// the default (the deterministic policy runs it); with autotuning the network times every valid
// variant per shape and direction and keeps the fastest (model::GpuOps), and for the forward with a
// BN prologue every variant of dw_variant_prologue.
//  - direct (block_h = 0): each thread loads the source pixels under its tile from global memory
//    itself; neighbouring tiles' halos are re-read through L1/L2. Fewer channels and smaller tiles
//    need fewer registers (more resident warps), larger tiles re-read fewer halo pixels.
//  - staged (block_h, block_w > 0): a block first copies the source pixels under a block_h x block_w
//    destination block (and up to 64 channels: dw_stage_channels) into shared memory with coalesced
//    128-bit loads, once each, padding as zeros, then its threads walk their tiles of that block from
//    shared memory. The stride-2 forward's block is block_h/2 x block_w/2 outputs (its source is
//    the same size). Source bytes read from L2: (block + halo) / block, 1.3x at 8 x 32, instead of the
//    direct tiles' (tile + halo) / tile through L1 (3x at 2x4).
// Every variant adds each output's taps in the same order (forward: (r, s) row-major; dgrad: reversed),
// and out-of-image taps are the same +0 values added by the same fmaf, so all of them give
// bitwise-identical y and dx: the choice changes speed only.
//  - lean (direct only): variant 0's kernel with the plan's sizes copied into locals before its loops;
//    the same code otherwise, the same sums, but ptxas allocates it 168 instead of 182 registers (fwd,
//    dgrad 164) at stride 1: an A/B of register allocation on the default, timed like any variant.
struct DwVariant {
    int vec, tile_h, tile_w;       // channels per thread, destination rows x columns per thread
    int block_h = 0, block_w = 0;  // staged: destination pixels per block at stride 1; 0: direct
    bool lean = false;             // direct: the plan's sizes in locals (PlanDims<true>)
};
constexpr DwVariant kDwVariants[] = {{8, 2, 4},        {8, 1, 4},        {4, 2, 4},       {4, 1, 4},
                                     {2, 2, 4},        {2, 4, 4},        {8, 2, 4, 8, 32}, {4, 2, 4, 8, 32},
                                     {2, 4, 4, 8, 32}, {8, 2, 4, 0, 0, true}};
constexpr int kDwVariantCount = static_cast<int>(sizeof(kDwVariants) / sizeof(kDwVariants[0]));
constexpr bool dw_variant_staged(int v) { return kDwVariants[v].block_h > 0; }
// A staged block's destination size for a pass: the variant's block, halved for the stride-2 forward.
constexpr int dw_stage_block(int v, int stride, bool dgrad, bool rows) {
    const int b = rows ? kDwVariants[v].block_h : kDwVariants[v].block_w;
    return dgrad ? b : b / stride;
}
// Channels per staged block: the largest of 64, 32, 16, 8 that divides C (C % 8 == 0). Shared-memory
// pixel pitch in bf16: the channels, plus 8 (16 bytes) when a pixel is not a whole multiple of 128
// bytes, so that the pixels of neighbouring thread tiles fall in different banks.
constexpr int dw_stage_channels(int c) { return c % 64 == 0 ? 64 : c % 32 == 0 ? 32 : c % 16 == 0 ? 16 : 8; }
constexpr int dw_stage_pitch(int cb) { return cb % 64 == 0 ? cb : cb + 8; }
// Source rows (or columns) a staged block of b destination pixels reads: forward b outputs at stride S
// read S*(b-1)+3 inputs; dgrad b dx pixels read b+2 dy pixels at stride 1, b/2+1 at stride 2 (b even).
constexpr int dw_stage_span(int b, int stride, bool dgrad) {
    return dgrad ? (stride == 1 ? b + 2 : b / 2 + 1) : stride * (b - 1) + 3;
}
// Whether variant v can run a gather pass at this stride: v in range; the stride-2 dgrad needs even
// tile sides (so that every tile starts on an even row and column); a staged block holds whole thread
// tiles (and, for the stride-2 dgrad, starts on even pixels).
constexpr bool dw_variant_valid(int v, int stride, bool dgrad) {
    if (v < 0 || v >= kDwVariantCount) return false;
    const DwVariant& d = kDwVariants[v];
    if (dgrad && stride == 2 && (d.tile_h % 2 != 0 || d.tile_w % 2 != 0)) return false;
    if (d.block_h > 0) {
        const int bh = dw_stage_block(v, stride, dgrad, true), bw = dw_stage_block(v, stride, dgrad, false);
        if (bh <= 0 || bw <= 0 || bh % d.tile_h != 0 || bw % d.tile_w != 0) return false;
        if (!dgrad && (d.block_h % stride != 0 || d.block_w % stride != 0)) return false;
    }
    return true;
}
// Whether gather variant v can run the forward with a BN prologue (DwPrologue). The prologue's
// per-channel constants are held in groups of 8 channels: the direct variants with 8 channels per
// thread apply it to each pixel of their tap window as they load it (a pixel shared by neighbouring
// tiles is transformed once per tile: 3 times per output at 2x4, 4.5 at 1x4); the staged variants
// apply it while staging, in 8-channel chunks, once per staged pixel (1.33 times per output at 8 x 32),
// whatever their channels per thread. Every one gives the bits of variant 0 with the prologue.
constexpr bool dw_variant_prologue(int v) {
    return v >= 0 && v < kDwVariantCount && (kDwVariants[v].vec == 8 || kDwVariants[v].block_h > 0);
}
// Shared memory a staged variant's kernel declares (bf16 elements): the largest source block of
// either stride and pass at 64 channels (the widest pitch). At most 48 KiB (static shared memory).
constexpr int dw_stage_elems(int v) {
    int most = 0;
    for (int stride = 1; stride <= 2; ++stride)
        for (int dgrad = 0; dgrad <= 1; ++dgrad) {
            const int r = dw_stage_span(dw_stage_block(v, stride, dgrad, true), stride, dgrad);
            const int c = dw_stage_span(dw_stage_block(v, stride, dgrad, false), stride, dgrad);
            most = r * c * 64 > most ? r * c * 64 : most;
        }
    return most;
}
constexpr bool dw_stage_fits() {
    for (int v = 0; v < kDwVariantCount; ++v)
        if (dw_variant_staged(v) && dw_stage_elems(v) * 2 > 48 * 1024) return false;
    return true;
}
static_assert(dw_stage_fits(), "a staged variant's source block exceeds 48 KiB of static shared memory");
// Output tile per thread in wgrad: 1 x 4 (9 fp32 accumulators per channel are live besides the tile of dy).
constexpr int kDwWgradTileH = 1, kDwWgradTileW = 4;
// wgrad variants: channels per thread (8, 4 or 2: 72, 36 or 18 accumulators) and block width (the
// channel groups per block: those of the 8-channel variant times `widen`, so blocks of up to 128 *
// widen threads). Index 0 is the default (the deterministic policy and the fused prologue run it);
// with autotuning the network times each and keeps the fastest. The tile, the tile lanes, the chunks
// and the lane tree are those of the 8-channel variant whatever the variant (dw_wgrad_grid), so each
// (c, tap) sum is formed by the same additions in the same order: every variant gives bitwise-
// identical dw. Fewer channels per thread means fewer registers and more threads on the same work;
// narrow blocks (widen 1) let several blocks share an SM, wide ones fewer, larger blocks.
//
// How a thread's loads are issued (`loads`):
//  - DwWgradLoads::per_pixel (variants 0-4): each pixel is loaded and multiplied in before the next is
//    loaded. The loads of padding pixels sit behind branches with their unpacking, so the compiler
//    issues them one or two at a time (sm_90 SASS: 2.5 loads per dependent batch), about 18 memory
//    round trips per tile.
//  - DwWgradLoads::hoisted: the tile's 4 dy pixels and its x window (3 x 6 at stride 1, 3 x 9 at stride
//    2) are loaded as raw bf16 vectors, predicated, before the first multiply: one round trip per
//    tile, at the price of the window's registers.
//  - DwWgradLoads::prefetch: hoisted, and the lane's next tile is loaded while the current one is
//    multiplied in (two register sets in turn): the round trip overlaps the arithmetic.
// The multiplies and their order are those of variant 0 in every case (the loads only feed them).
enum class DwWgradLoads { per_pixel, hoisted, prefetch };
struct DwWgradVariant {
    int vec, widen;                                // channels per thread; block width over the 8-channel variant's
    DwWgradLoads loads = DwWgradLoads::per_pixel;  // how a thread's loads are issued
};
constexpr DwWgradVariant kDwWgradVariants[] = {
    {8, 1}, {4, 2}, {2, 4}, {4, 1}, {2, 1},
    {8, 1, DwWgradLoads::hoisted}, {4, 1, DwWgradLoads::hoisted}, {4, 1, DwWgradLoads::prefetch},
    {2, 1, DwWgradLoads::prefetch}};
constexpr int kDwWgradVariantCount = static_cast<int>(sizeof(kDwWgradVariants) / sizeof(kDwWgradVariants[0]));
constexpr int kDwWgradThreads = 128;  // at most, per block of a wgrad variant with widen 1 (widen times that otherwise)
constexpr int kDwMaxChunks = 256;     // blocks of the wgrad partial-sum kernel, over all channel blocks
constexpr int kDwMinLaneItems = 4;    // fewer chunks rather than fewer than this many tiles per thread
constexpr int kDwFinalizeX = 32;      // (c, tap) entries per finalize block ...
constexpr int kDwFinalizeY = 16;      // ... and chunk lanes per entry

// One gather pass (forward over y, dgrad over dx) in one variant. Direct: thread t of the 1-D grid owns
// channel group t % groups (vec channels) and a tile_h x tile_w tile of destination pixels;
// items = n * tiles_h * tiles_w * groups. Staged: block b of the 1-D grid owns channel block
// b % cblocks (cb channels), then a block_h x block_w block of destination pixels (blocks_w per row,
// blocks_h per image), then image; its kDwThreads threads take its (cb / vec) * (block_h / tile_h) *
// (block_w / tile_w) thread tiles in turn, channel group fastest.
struct DwTileGrid {
    int variant = 0;               // index into kDwVariants
    int vec = 0, groups = 0;       // channels per thread, C / vec
    int tile_h = 0, tile_w = 0;    // destination pixels per thread
    int tiles_h = 0, tiles_w = 0;  // ceil(dst_h / tile_h), ceil(dst_w / tile_w)
    long long items = 0;           // thread tiles
    int block = 0;                 // kDwThreads
    long long grid = 0;            // blocks (1-D): ceil(items / block) direct, n * blocks_h * blocks_w * cblocks staged
    // staged only (0 when direct):
    int block_h = 0, block_w = 0;    // destination pixels per block
    int blocks_h = 0, blocks_w = 0;  // ceil(dst_h / block_h), ceil(dst_w / block_w)
    int cb = 0, cblocks = 0;         // channels per block (dw_stage_channels), C / cb
    int pitch = 0;                   // shared-memory bf16 per staged pixel (dw_stage_pitch)
    int src_h = 0, src_w = 0;        // staged source rows, columns per block (dw_stage_span)
};

// wgrad, pass 1: grid (grid_x, chunks), block (block_x, block_y). threadIdx.x + block_x * blockIdx.x
// is the channel group (vec channels); the items = n * tiles_h * tiles_w output tiles (tile_h x
// tile_w) of one channel group are split into `chunks` even, non-empty ranges, one per blockIdx.y; the
// block's block_y lanes take every block_y-th tile of the range, then a fixed-shape tree adds the
// lanes and the block writes its chunk's C*9 partials. Pass 2: finalize_blocks blocks of
// (kDwFinalizeX, kDwFinalizeY) threads add the chunks per (c, tap) in a fixed order (fp64) into dw.
// block_y and chunks are the 8-channel variant's in every variant (the summation order); block_x and
// grid_x follow the variant's channel groups and width.
struct DwWgradGrid {
    int variant = 0;             // index into kDwWgradVariants
    int vec = 0, groups = 0;     // channels per thread, C / vec
    int tile_h = 0, tile_w = 0;
    int tiles_h = 0, tiles_w = 0;  // ceil(P / tile_h), ceil(Q / tile_w)
    long long items = 0;           // output tiles per channel group
    int block_x = 0;               // channel groups per block: min(groups, min(C/8, 32) * widen)
    int block_y = 0;               // tile lanes: the largest power of two with min(C/8, 32)*block_y <= kDwWgradThreads
    int grid_x = 0;                // ceil(groups / block_x)
    int chunks = 0;                // gridDim.y; in [1, items]
    int finalize_blocks = 0;       // ceil(C*9 / kDwFinalizeX)
};

struct DwConvPlan {
    int n = 0, h = 0, w = 0, c = 0, stride = 0;
    int p = 0, q = 0;  // output height, width
    DwTileGrid fwd;    // over y (P, Q)
    DwTileGrid dgrad;  // over dx (H, W)
    DwWgradGrid wgrad;
    size_t workspace_floats = 0;  // wgrad partials: chunks * C * 9
};

constexpr long long dw_ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// The grid of variant v (in range; validity for the pass is the plan's check) for a pass at stride
// `stride` whose destination is dst_h x dst_w.
constexpr DwTileGrid dw_tile_grid(int n, int dst_h, int dst_w, int c, int v, int stride, bool dgrad) {
    DwTileGrid g;
    g.variant = v;
    g.vec = kDwVariants[v].vec;
    g.groups = c / g.vec;
    g.tile_h = kDwVariants[v].tile_h;
    g.tile_w = kDwVariants[v].tile_w;
    g.tiles_h = static_cast<int>(dw_ceil_div(dst_h, g.tile_h));
    g.tiles_w = static_cast<int>(dw_ceil_div(dst_w, g.tile_w));
    g.items = static_cast<long long>(n) * g.tiles_h * g.tiles_w * g.groups;
    g.block = kDwThreads;
    g.grid = dw_ceil_div(g.items, kDwThreads);
    if (dw_variant_staged(v)) {
        g.block_h = dw_stage_block(v, stride, dgrad, true);
        g.block_w = dw_stage_block(v, stride, dgrad, false);
        g.blocks_h = static_cast<int>(dw_ceil_div(dst_h, g.block_h > 0 ? g.block_h : 1));
        g.blocks_w = static_cast<int>(dw_ceil_div(dst_w, g.block_w > 0 ? g.block_w : 1));
        g.cb = dw_stage_channels(c);
        g.cblocks = c / g.cb;
        g.pitch = dw_stage_pitch(g.cb);
        g.src_h = dw_stage_span(g.block_h, stride, dgrad);
        g.src_w = dw_stage_span(g.block_w, stride, dgrad);
        g.grid = static_cast<long long>(n) * g.blocks_h * g.blocks_w * g.cblocks;
    }
    return g;
}

// The grid of wgrad variant v (in range).
constexpr DwWgradGrid dw_wgrad_grid(int n, int p, int q, int c, int v = 0) {
    DwWgradGrid g;
    g.variant = v;
    g.vec = kDwWgradVariants[v].vec;
    g.groups = c / g.vec;
    g.tile_h = kDwWgradTileH;
    g.tile_w = kDwWgradTileW;
    g.tiles_h = static_cast<int>(dw_ceil_div(p, kDwWgradTileH));
    g.tiles_w = static_cast<int>(dw_ceil_div(q, kDwWgradTileW));
    g.items = static_cast<long long>(n) * g.tiles_h * g.tiles_w;
    // The lanes and the chunks: a fixed function of the shape (never of the device or the variant), so
    // the summation order is too. They are sized for 8 channels per thread.
    const int groups8 = c / 8, block_x8 = std::min(groups8, 32);
    g.block_y = 1;
    while (block_x8 * g.block_y * 2 <= kDwWgradThreads) g.block_y *= 2;
    const int grid_x8 = static_cast<int>(dw_ceil_div(groups8, block_x8));
    const long long by_work = std::max(1LL, g.items / (static_cast<long long>(g.block_y) * kDwMinLaneItems));
    g.chunks = static_cast<int>(std::min(dw_ceil_div(kDwMaxChunks, grid_x8), by_work));
    g.block_x = std::min(g.groups, block_x8 * kDwWgradVariants[v].widen);
    g.grid_x = static_cast<int>(dw_ceil_div(g.groups, g.block_x));
    g.finalize_blocks = static_cast<int>(dw_ceil_div(9LL * c, kDwFinalizeX));
    return g;
}

// The plan of a supported shape, without checks (dwconv3x3_plan checks first): a pure function.
// fwd_variant, dgrad_variant: indices into kDwVariants; wgrad_variant: into kDwWgradVariants (in range).
constexpr DwConvPlan dwconv3x3_geometry(int n, int h, int w, int c, int stride, int fwd_variant = 0,
                                        int dgrad_variant = 0, int wgrad_variant = 0) {
    DwConvPlan pl;
    pl.n = n;
    pl.h = h;
    pl.w = w;
    pl.c = c;
    pl.stride = stride;
    pl.p = (h - 1) / stride + 1;  // (h + 2*1 - 3)/stride + 1
    pl.q = (w - 1) / stride + 1;
    pl.fwd = dw_tile_grid(n, pl.p, pl.q, c, fwd_variant, stride, false);
    pl.dgrad = dw_tile_grid(n, h, w, c, dgrad_variant, stride, true);
    pl.wgrad = dw_wgrad_grid(n, pl.p, pl.q, c, wgrad_variant);
    pl.workspace_floats = static_cast<size_t>(pl.wgrad.chunks) * static_cast<size_t>(c) * 9;
    return pl;
}

// ---- the fused stride-1 backward: dgrad and wgrad in one pass over dy (docs/KERNELS_DWCONV.md) ----
// A staged kernel: block b owns channel block b % cblocks (cb channels, dw_stage_channels) and a chunk
// of the n * blocks_h * blocks_w spatial blocks of kDwFusedBlockH x kDwFusedBlockW dx pixels; for each
// spatial block in turn it copies dy's and x's (block + 1-pixel halo) pixels into shared memory, then
// every thread takes its kDwFusedTileH x kDwFusedTileW thread tiles (kDwFusedVec channels, channel group
// fastest) and computes dx there (the staged dgrad's loop: the bits of every dgrad variant) and adds the
// same tiles' dy x x-window products into its 9 * kDwFusedVec filter sums (dy pixel (p, q) with the
// x pixels (p - 1 + r, q - 1 + s), the forward's pairing). At the end the threads of a channel group
// (kDwThreads / groups lanes) are added with a fixed tree and the block writes its chunk's partials;
// a finalize pass adds the chunks per (c, tap) in fp64 into dw, as the wgrad's second pass does.
// Per element: dy and x are read once from DRAM (their halos, 1.41x, mostly from L2), dx written once:
// three tensor passes instead of the separate dgrad's two and wgrad's two.
// The partition of the filter sums (spatial blocks, chunks, lanes) is a function of the shape only,
// so two runs are bitwise equal; it is not the two-pass wgrad's partition, so dw differs from
// dwconv3x3_backward_filter_cuda's in the last bits (dx does not differ at all).
constexpr int kDwFusedBlockH = 8, kDwFusedBlockW = 16;  // dx (= dy, stride 1) pixels per spatial block
constexpr int kDwFusedVec = 4, kDwFusedTileH = 2, kDwFusedTileW = 4;  // channels and pixels per thread tile
constexpr int kDwFusedMaxBlocks = 1024;                 // chunks * cblocks at most (the grid)
// Shared memory per staged tensor at the widest block (64 channels, pitch 64): (8+2) x (16+2) pixels.
constexpr int kDwFusedStageElems = (kDwFusedBlockH + 2) * (kDwFusedBlockW + 2) * 64;
static_assert(2 * kDwFusedStageElems * 2 <= 48 * 1024, "the fused backward's two staged blocks exceed 48 KiB");
static_assert((9 + 2) * kDwFusedVec * kDwThreads * 4 <= kDwFusedStageElems * 2,
              "the fused backward's lane tree (filter sums and BN-backward sums) must fit in one staged block's "
              "shared memory");
static_assert(kDwFusedBlockH % kDwFusedTileH == 0 && kDwFusedBlockW % kDwFusedTileW == 0,
              "a spatial block holds whole thread tiles");

struct DwFusedPlan {
    int n = 0, h = 0, w = 0, c = 0;  // stride 1: dy is n x h x w x c too
    DwTileGrid stage;                // block_h/w, blocks_h/w, cb, cblocks, pitch, src_h/w (of the staged dgrad)
    long long spatial = 0;           // n * blocks_h * blocks_w spatial blocks
    int chunks = 0;                  // even, non-empty ranges of the spatial blocks, one per block row
    long long grid = 0;              // cblocks * chunks blocks (1-D), channel block fastest
    int groups = 0;                  // channel groups per block: cb / kDwFusedVec
    int lanes = 0;                   // threads per channel group: kDwThreads / groups
    int finalize_blocks = 0;         // ceil(C*9 / kDwFinalizeX)
    size_t workspace_floats = 0;     // chunks * C * 9 partials
    size_t bn_grad_floats = 0;       // 2 * chunks * C: the BN-backward epilogue's partials, after those
};

// The fused plan of a supported stride-1 shape, unchecked (dwconv3x3_fused_plan checks): pure.
// max_blocks: the grid's bound (kDwFusedMaxBlocks in the network; the tests pass small values so that
// small shapes run several spatial blocks per chunk, as the model's do).
constexpr DwFusedPlan dwconv3x3_fused_geometry(int n, int h, int w, int c, int max_blocks = kDwFusedMaxBlocks) {
    DwFusedPlan f;
    f.n = n;
    f.h = h;
    f.w = w;
    f.c = c;
    DwTileGrid& g = f.stage;
    g.vec = kDwFusedVec;
    g.groups = c / kDwFusedVec;
    g.tile_h = kDwFusedTileH;
    g.tile_w = kDwFusedTileW;
    g.block = kDwThreads;
    g.block_h = kDwFusedBlockH;
    g.block_w = kDwFusedBlockW;
    g.blocks_h = static_cast<int>(dw_ceil_div(h, kDwFusedBlockH));
    g.blocks_w = static_cast<int>(dw_ceil_div(w, kDwFusedBlockW));
    g.cb = dw_stage_channels(c);
    g.cblocks = c / g.cb;
    g.pitch = dw_stage_pitch(g.cb);
    g.src_h = kDwFusedBlockH + 2;
    g.src_w = kDwFusedBlockW + 2;
    f.spatial = static_cast<long long>(n) * g.blocks_h * g.blocks_w;
    const long long per_cblock = std::max(1, max_blocks / g.cblocks);
    f.chunks = static_cast<int>(std::min(f.spatial, per_cblock));
    f.grid = static_cast<long long>(g.cblocks) * f.chunks;
    g.grid = f.grid;
    f.groups = g.cb / kDwFusedVec;
    f.lanes = kDwThreads / f.groups;
    f.finalize_blocks = static_cast<int>(dw_ceil_div(9LL * c, kDwFinalizeX));
    f.workspace_floats = static_cast<size_t>(f.chunks) * static_cast<size_t>(c) * 9;
    f.bn_grad_floats = 2 * static_cast<size_t>(f.chunks) * static_cast<size_t>(c);
    return f;
}


// k == 3, pad == 1, stride 1 or 2, groups == cin == cout, C % 8 == 0, no bias, positive dims, and
// the launch fits (at most 2^40 input elements, the default variants' thread tiles countable in 32
// bits). Never throws.
bool dwconv3x3_supported(const ConvShape& s);

// Whether gather variant v can run the forward (dgrad false) or dgrad pass of s: s supported, v valid
// for the stride (dw_variant_valid) and its thread tiles countable in 32 bits. Never throws.
bool dwconv3x3_variant_supported(const ConvShape& s, int variant, bool dgrad);

// Whether wgrad variant v (an index into kDwWgradVariants) can run for s: s supported and v in range (every
// wgrad variant has the same tiles and chunks). Never throws.
bool dwconv3x3_wgrad_variant_supported(const ConvShape& s, int variant);

// The plan for s with these variants (gather: kDwVariants; wgrad: kDwWgradVariants); throws rt::Error
// naming what is unsupported (and its value), or the variant that cannot run its pass (out of range;
// odd tile for the stride-2 dgrad).
DwConvPlan dwconv3x3_plan(const ConvShape& s, int fwd_variant = 0, int dgrad_variant = 0, int wgrad_variant = 0);

// "8ch 2x4": a gather variant's channels per thread and tile, for logs ("variant ?" when out of range).
const char* dwconv3x3_variant_name(int v);
// "2ch 1x4 w4": a wgrad variant's channels per thread, tile and block width ("variant ?" when out of range).
const char* dwconv3x3_wgrad_variant_name(int v);

// fp32 workspace backward_filter needs: chunks * C * 9 floats (scratch, no initialisation needed).
size_t dwconv3x3_workspace_floats(const ConvShape& s);

// Whether the fused backward can run s: s supported and stride 1. Never throws.
bool dwconv3x3_fused_supported(const ConvShape& s);
// Its plan; throws rt::Error naming what is unsupported (the shape's reason, or the stride).
DwFusedPlan dwconv3x3_fused_plan(const ConvShape& s, int max_blocks = kDwFusedMaxBlocks);
// fp32 workspace the fused backward needs: chunks * C * 9 floats, plus 2 * chunks * C with the BN-backward
// epilogue (bn_grad) (scratch, no initialisation needed).
size_t dwconv3x3_fused_workspace_floats(const ConvShape& s, int max_blocks = kDwFusedMaxBlocks, bool bn_grad = false);

// The forward's statistics epilogue (BnStatsOut, kernels/bn_fusion.h; the staged variants only): every
// staged block writes, per channel of its channel block, its shift (its first output pixel's stored value,
// which every thread of the block computes itself from the staged source), the shifted sum and the shifted
// sum of squares of the values it stores (a fixed lane butterfly, then the 4 warps in order), one chunk
// per spatial block: 3 * n * blocks_h * blocks_w * C floats. A finalize launch of
// ceil(C / kDwStatsFinalizeX) blocks of (kDwStatsFinalizeX, kDwStatsFinalizeY) threads merges them
// (kernels/bn_stats_chunks.cuh): narrow in channels and wide in lanes, as a spatial block is small and
// the chunks many (4,096 per channel at batch 128 and 64 x 128).
constexpr int kDwStatsFinalizeX = 8, kDwStatsFinalizeY = 32;
constexpr bool dw_stats_reduction_fits() {  // 2 sums x 4 warps + the shift, 64 channels, fp32
    for (int v = 0; v < kDwVariantCount; ++v)
        if (dw_variant_staged(v) && (2 * (kDwThreads / 32) + 1) * 64 * 4 > 2 * dw_stage_elems(v)) return false;
    return true;
}
static_assert(dw_stats_reduction_fits(), "the statistics reduction must fit in a staged block's shared memory");
// The fp32 workspace of the statistics epilogue in staged variant v (throws rt::Error for an unsupported
// shape or a variant without the epilogue), and the most any staged variant valid for s needs (0 if none).
size_t dwconv3x3_stats_workspace_floats(const ConvShape& s, int variant);
size_t dwconv3x3_stats_workspace_floats(const ConvShape& s);

// x (N,H,W,C), w (C*9), y (N,P,Q,C), all bf16. y overwritten. pro: null, or the producer's BN +
// activation applied to x on load (DwPrologue; in the variants of dw_variant_prologue, all bitwise
// equal). variant: index into kDwVariants. stats: null, or (a staged variant) y's batch statistics
// gathered in the epilogue as described above, with `workspace` of at least
// dwconv3x3_stats_workspace_floats(s, variant) floats (a second launch: the finalize); y is bitwise the
// same with or without it.
void dwconv3x3_forward_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y,
                            const DwPrologue* pro = nullptr, int variant = 0, const BnStatsOut* stats = nullptr,
                            float* workspace = nullptr, size_t workspace_floats = 0);

// dy (N,P,Q,C), w (C*9), dx (N,H,W,C), all bf16. dx += dwconv^T(dy, w): every dx element read once,
// the fp32 sum added in fp32 and rounded to bf16 once. A gather for both strides: deterministic.
// accumulate = false: dx = dwconv^T(dy, w), overwritten (never read). variant: index into
// kDwVariants, valid for the stride (dw_variant_valid).
void dwconv3x3_backward_data_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx,
                                  bool accumulate = true, int variant = 0);

// x (N,H,W,C), dy (N,P,Q,C) bf16; dw (C*9) fp32 accumulated (+=). Per-chunk partials go to the
// workspace (at least dwconv3x3_workspace_floats(s) floats), then a fixed-order combine: no atomics,
// two runs, and every variant, give bitwise-equal dw. pro: as in the forward (the same x' the forward
// read; only with variant 0). variant: index into kDwWgradVariants.
void dwconv3x3_backward_filter_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, float* dw,
                                    float* workspace, size_t workspace_floats, const DwPrologue* pro = nullptr,
                                    int variant = 0);

// The fused stride-1 backward (DwFusedPlan): x (N,H,W,C), dy (N,H,W,C), w (C*9) bf16; dx (N,H,W,C) bf16,
// overwritten (accumulate = false) or dx += as backward_data; dw (C*9) fp32 +=. dx is bitwise what
// dwconv3x3_backward_data_cuda writes (any variant); dw equals backward_filter's sum to fp32 rounding
// of another summation order, deterministic. Workspace: at least dwconv3x3_fused_workspace_floats(s)
// floats. Checks as the two separate launchers (dx apart from x, dy, w, dw and the workspace).
// bnb: null, or the consumer BatchNorm's backward formed on load (DwBnBackward): dy is then the BN
// output's gradient, and dx and dw are bitwise those of bn_act_backward followed by this call on its dx.
// max_blocks: the plan's grid bound (dwconv3x3_fused_geometry; positive), with the workspace to match.
// pro: null, or the forward's BN prologue (the fused LiteBlock; not with bnb): x is then the producer's
// pre-BN output, and dx and dw are bitwise those of this call on the stored bf16(act(bn(x))) that the
// producer's apply pass (bn_act_forward_*) would have written.
// bng: null, or (with a train-mode pro) that producer BN's backward reductions from the dx this call stores
// (BnGradSums: the fused LiteBlock's BN1 reduce; x there is this call's x, the BN's vectors the prologue's and
// its activation the prologue's, checked), with a workspace of dwconv3x3_fused_workspace_floats(s,
// max_blocks, true) (a third launch: the finalize). dx and dw are bitwise the same with or without it.
void dwconv3x3_backward_fused_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy,
                                   const bf16* w, bf16* dx, float* dw, float* workspace, size_t workspace_floats,
                                   bool accumulate, const DwBnBackward* bnb = nullptr,
                                   int max_blocks = kDwFusedMaxBlocks, const DwPrologue* pro = nullptr,
                                   const BnGradSums* bng = nullptr);

}  // namespace kern
