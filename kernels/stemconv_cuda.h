// Custom CUDA kernels for the network's first convolution, the stem conv (kernels/stemconv.cu): a dense
// 3x3, stride 2, pad 1 convolution without bias on an input of only 2 channels (gray + mask; 4 for
// RGB + mask), which cuDNN may refuse in bf16 NHWC. Forward and weight gradient; the input is the
// network input, so there is no data gradient. Declared without CUDA types so g++ code (layers,
// planner, tests) can call them; device buffers of kern::bf16 are passed to the kernels as
// __nv_bfloat16. Design, bytes moved and FLOPs: docs/KERNELS_STEMCONV.md.
//
//   x (N, H, W, Cin) bf16, Cin in {2, 4};  w (Cout, 3, 3, Cin) bf16 KRSC (the bf16 working copy);
//   y, dy (N, P, Q, Cout) bf16, P = (H - 1)/2 + 1, Q = (W - 1)/2 + 1;  dw (Cout*9*Cin) fp32 KRSC.
//   forward:  y  = conv(x, w)                           overwritten, fp32 accumulation
//   wgrad:    dw += sum over N, P, Q of x-patch * dy     deterministic two-pass reduction, no atomics
//
// Both kernels cut the output into tiles of kStemTileP rows x kStemTileQ columns of one image. A block
// stages the tile's input halo ((2*kStemTileP + 1) x (2*kStemTileQ + 1) pixels, zeros outside the
// image) in shared memory as fp32, so x is read once (plus the one-pixel halo) with coalesced loads.
// The grid arithmetic is here (constexpr) so CPU tests check exactly what the launchers use.
// Requirements checked by the launchers (rt::Error, before any launch): CUDA Exec; a supported shape;
// bf16 pointers non-null and 16-byte aligned; dw and workspace non-null and 4-byte aligned; outputs
// not aliasing inputs; a large enough workspace. Launchers enqueue on ex.stream, never allocate and
// never synchronise (CUDA-graph capturable).
#pragma once
#include <algorithm>
#include <cstddef>

#include "kernels/bf16.h"
#include "kernels/conv.h"
#include "runtime/exec.h"

namespace kern {

// ---- geometry constants (shared by the plan, the kernels and the tests) ----
constexpr int kStemTileP = 4;                   // output rows per tile; each thread owns one column of them
constexpr int kStemTileQ = 32;                  // output columns per tile: one per lane
constexpr int kStemHaloH = 2 * kStemTileP + 1;  // input rows under a tile (9)
constexpr int kStemHaloW = 2 * kStemTileQ + 1;  // input columns under a tile (65)
constexpr int kStemMaxCout = 64;                // at most 8 channel groups of 8
constexpr int kStemWgradGroups = 4;             // most channel groups per wgrad block (384 threads)
constexpr int kStemWgradWarpsPerGroup = 3;      // one warp per filter row r
constexpr int kStemMaxChunks = 1024;            // wgrad blocks, over all channel blocks (at most)
constexpr int kStemMinTilesPerChunk = 8;        // fewer chunks rather than fewer tiles per block
constexpr int kStemFinalizeX = 32;              // dw entries per finalize block ...
constexpr int kStemFinalizeY = 16;              // ... and chunk lanes per entry

// Launch geometry of both directions for one shape; a pure function of (n, h, w, cin, cout).
//  forward: grid (tiles_w, tiles_h, n), block fwd_threads = 32 * groups; thread t owns channel group
//           t % groups (8 channels, one 128-bit store per pixel) and column t / groups of the tile,
//           all kStemTileP rows of it.
//  wgrad pass 1: grid (wgrad_cblocks, chunks), block wgrad_threads = 96 * wgrad_gb; channel block b
//           covers groups [b*wgrad_gb, (b+1)*wgrad_gb) (past `groups`: idle warps); chunk k covers
//           tiles [tiles*k/chunks, tiles*(k+1)/chunks) (none empty) of the n*tiles_h*tiles_w tiles.
//           Warp (group, r) owns the 8 x 3 x Cin sums of filter row r, lane = tile column.
//  wgrad pass 2: finalize_blocks blocks of (kStemFinalizeX, kStemFinalizeY) threads add the chunk
//           partials of each dw entry in a fixed order (fp64) into dw.
struct StemConvPlan {
    int n = 0, h = 0, w = 0, cin = 0, cout = 0;
    int p = 0, q = 0;              // output height, width
    int groups = 0;                // Cout / 8
    int tiles_h = 0, tiles_w = 0;  // ceil(P / kStemTileP), ceil(Q / kStemTileQ)
    long long tiles = 0;           // n * tiles_h * tiles_w
    int fwd_threads = 0;           // 32 * groups (<= 256)
    int wgrad_cblocks = 0;         // ceil(groups / kStemWgradGroups)
    int wgrad_gb = 0;              // channel groups per wgrad block: ceil(groups / wgrad_cblocks)
    int wgrad_threads = 0;         // 32 * kStemWgradWarpsPerGroup * wgrad_gb (<= 384)
    int chunks = 0;                // gridDim.y of pass 1; in [1, tiles]
    int entries = 0;               // dw entries: Cout * 9 * Cin
    int finalize_blocks = 0;       // ceil(entries / kStemFinalizeX)
    size_t workspace_floats = 0;   // pass-1 partials: chunks * entries
};

constexpr long long stem_ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// The plan of a supported shape, without checks (stemconv_plan checks first): a pure function.
constexpr StemConvPlan stemconv_geometry(int n, int h, int w, int cin, int cout) {
    StemConvPlan pl;
    pl.n = n;
    pl.h = h;
    pl.w = w;
    pl.cin = cin;
    pl.cout = cout;
    pl.p = (h - 1) / 2 + 1;  // (h + 2*1 - 3)/2 + 1
    pl.q = (w - 1) / 2 + 1;
    pl.groups = cout / 8;
    pl.tiles_h = static_cast<int>(stem_ceil_div(pl.p, kStemTileP));
    pl.tiles_w = static_cast<int>(stem_ceil_div(pl.q, kStemTileQ));
    pl.tiles = static_cast<long long>(n) * pl.tiles_h * pl.tiles_w;
    pl.fwd_threads = 32 * pl.groups;
    pl.wgrad_cblocks = static_cast<int>(stem_ceil_div(pl.groups, kStemWgradGroups));
    pl.wgrad_gb = static_cast<int>(stem_ceil_div(pl.groups, pl.wgrad_cblocks));
    pl.wgrad_threads = 32 * kStemWgradWarpsPerGroup * pl.wgrad_gb;
    // A fixed function of the shape (never of the device), so the summation order is too.
    const long long by_work = std::max(1LL, pl.tiles / kStemMinTilesPerChunk);
    pl.chunks = static_cast<int>(std::min(stem_ceil_div(kStemMaxChunks, pl.wgrad_cblocks), by_work));
    pl.entries = cout * 9 * cin;
    pl.finalize_blocks = static_cast<int>(stem_ceil_div(pl.entries, kStemFinalizeX));
    pl.workspace_floats = static_cast<size_t>(pl.chunks) * static_cast<size_t>(pl.entries);
    return pl;
}

// k == 3, stride == 2, pad == 1, groups == 1, cin in {2, 4}, cout a multiple of 8 in [8, 64], no bias,
// positive dims, and the launch fits (n <= 65535, tiles_h <= 65535, tiles <= 2^31 - 1). Never throws.
bool stemconv_supported(const ConvShape& s);

// The plan for s; throws rt::Error naming what is unsupported (and its value).
StemConvPlan stemconv_plan(const ConvShape& s);

// fp32 workspace backward_filter needs: chunks * Cout * 9 * Cin floats (scratch, no initialisation).
size_t stemconv_workspace_floats(const ConvShape& s);

// x (N,H,W,Cin), w (Cout,3,3,Cin), y (N,P,Q,Cout), all bf16. y overwritten.
void stemconv_forward_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y);

// x (N,H,W,Cin), dy (N,P,Q,Cout) bf16; dw (Cout*9*Cin) fp32 accumulated (+=). Per-chunk partials go
// to the workspace (at least stemconv_workspace_floats(s) floats), then a fixed-order combine: no
// atomics, two runs are bitwise equal.
void stemconv_backward_filter_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, float* dw,
                                   float* workspace, size_t workspace_floats);

}  // namespace kern
